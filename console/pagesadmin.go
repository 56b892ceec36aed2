package console

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// tokensView is the Tokens page.
type tokensView struct {
	Tokens  []tokenRow
	Revoked *apitype.RevokeResponse
}

// tokenRow is a token as the Tokens page shows it: who minted it and
// who used it by name where the record has a node's id.
type tokenRow struct {
	apitype.Token
	Minter, Consumer []part
}

func (p *pages) tokens(w http.ResponseWriter, r *http.Request) {
	p.renderTokens(w, r, http.StatusOK, nil, nil)
}

func (p *pages) renderTokens(w http.ResponseWriter, r *http.Request, status int, revoked *apitype.RevokeResponse, failed error) {
	ctx, cancel := p.call(r)
	defer cancel()
	v := view{Title: "Tokens", Nav: "tokens", CSRF: csrfOf(r.Context()), Problem: problemOf(failed)}
	ts, err := p.client.Tokens(ctx)
	if err != nil && failed == nil {
		v.Problem = problemOf(err)
	}
	slices.SortFunc(ts, func(a, b apitype.Token) int { return b.Created.Compare(a.Created) })
	names := p.names(ctx)
	rows := make([]tokenRow, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, tokenRow{Token: t, Minter: names.parts(t.MintedBy), Consumer: names.parts(t.ConsumedBy)})
	}
	v.Data = tokensView{Tokens: rows, Revoked: revoked}
	p.render(w, status, "tokens", v)
}

func (p *pages) revoke(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.PostForm.Get("id"))
	if id == "" {
		p.renderTokens(w, r, http.StatusBadRequest, nil, codes.Wrap(codes.ConsoleForm, fmt.Errorf("id: required")))
		return
	}
	ctx, cancel := p.call(r)
	defer cancel()
	resp, err := p.client.RevokeToken(ctx, id)
	if err != nil {
		p.renderTokens(w, r, codes.OrInternal(err).Status(), nil, err)
		return
	}
	p.renderTokens(w, r, http.StatusOK, resp, nil)
}

// approvalsView is the Approvals page.
type approvalsView struct {
	Waiting  []apitype.WaitingJoin
	Approved *apitype.ApproveResponse
	Rejected *apitype.RevokeResponse
}

func (p *pages) approvals(w http.ResponseWriter, r *http.Request) {
	p.renderApprovals(w, r, http.StatusOK, approvalsView{}, nil)
}

func (p *pages) renderApprovals(w http.ResponseWriter, r *http.Request, status int, av approvalsView, failed error) {
	ctx, cancel := p.call(r)
	defer cancel()
	v := view{Title: "Approvals", Nav: "approvals", CSRF: csrfOf(r.Context()), Problem: problemOf(failed)}
	st, err := p.client.Status(ctx)
	if err != nil && failed == nil {
		v.Problem = problemOf(err)
	}
	if err == nil {
		av.Waiting = st.Approvals
	}
	v.Data = av
	p.render(w, status, "approvals", v)
}

func (p *pages) approve(w http.ResponseWriter, r *http.Request) {
	req := apitype.ApproveRequest{Name: strings.TrimSpace(r.PostForm.Get("name")), Code: strings.TrimSpace(r.PostForm.Get("code"))}
	if req.Name == "" || req.Code == "" {
		p.renderApprovals(w, r, http.StatusBadRequest, approvalsView{}, codes.Wrap(codes.ConsoleForm, fmt.Errorf("name and code: required")))
		return
	}
	ctx, cancel := p.call(r)
	defer cancel()
	resp, err := p.client.Approve(ctx, req)
	if err != nil {
		p.renderApprovals(w, r, codes.OrInternal(err).Status(), approvalsView{}, err)
		return
	}
	p.renderApprovals(w, r, http.StatusOK, approvalsView{Approved: resp}, nil)
}

// reject turns a waiting join down by revoking its token: the local API
// has no reject of its own, and a revoked token ends the waiting join
// with TokenRevoked on the joiner.
func (p *pages) reject(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.PostForm.Get("token_id"))
	if id == "" {
		p.renderApprovals(w, r, http.StatusBadRequest, approvalsView{}, codes.Wrap(codes.ConsoleForm, fmt.Errorf("token_id: required")))
		return
	}
	ctx, cancel := p.call(r)
	defer cancel()
	resp, err := p.client.RevokeToken(ctx, id)
	if err != nil {
		p.renderApprovals(w, r, codes.OrInternal(err).Status(), approvalsView{}, err)
		return
	}
	p.renderApprovals(w, r, http.StatusOK, approvalsView{Rejected: resp}, nil)
}

// auditView is the Audit page: the events of the last Since (all when
// empty) that contain Filter, newest first.
type auditView struct {
	Filter string
	Since  string
	Events []auditRow
	Total  int
}

// auditRow is an audit event as the Audit page shows it: the actor and
// the detail with node names in place of the ids the record has.
type auditRow struct {
	apitype.AuditEvent
	Who, What []part
}

// auditSince are the periods the Audit page offers, as `meshctl audit
// --since` takes them.
var auditSince = []string{"1h", "24h", "168h"}

func (p *pages) audit(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := p.call(r)
	defer cancel()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	since := r.URL.Query().Get("since")
	v := view{Title: "Audit", Nav: "audit", CSRF: csrfOf(r.Context())}
	var d time.Duration
	if since != "" {
		if !slices.Contains(auditSince, since) {
			v.Problem = problemOf(codes.Wrap(codes.ConsoleForm, fmt.Errorf("since: want one of %s", strings.Join(auditSince, ", "))))
			v.Data = auditView{Filter: q}
			p.render(w, http.StatusBadRequest, "audit", v)
			return
		}
		d, _ = time.ParseDuration(since)
	}
	events, err := p.client.Audit(ctx, d)
	if err != nil {
		v.Problem = problemOf(err)
	}
	av := auditView{Filter: q, Since: since, Total: len(events)}
	lq := strings.ToLower(q)
	names := nodeNames{}
	if len(events) > 0 {
		names = p.names(ctx)
	}
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		// The text as the page shows it (names) and as meshd sent it
		// (ids): a filter finds either.
		hay := strings.ToLower(strings.Join([]string{string(e.Code), e.Event, e.Actor, e.Subject, e.Detail,
			names.text(e.Actor), names.text(e.Detail)}, "\x00"))
		if lq == "" || strings.Contains(hay, lq) {
			av.Events = append(av.Events, auditRow{AuditEvent: e, Who: names.parts(e.Actor), What: names.parts(e.Detail)})
		}
	}
	v.Data = av
	p.render(w, http.StatusOK, "audit", v)
}
