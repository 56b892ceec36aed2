package control

import (
	"context"
	"fmt"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// The approval of a join (`meshctl admit NAME --approve`, then `meshctl
// approve NAME CODE` on any control node; enroll/approval.go). The seed
// that holds the waiting join records it in raft (RequestApproval); the
// operator's code goes through raft too (ApproveJoin, forwarded to the
// leader as every write), so the FSM alone decides whether it matches and
// counts the wrong ones. Neither the code nor its hash is logged here.

var _ enroll.Approvals = (*Ledger)(nil)

// RequestApproval writes that the session p waits for approval of the
// join with token h, via this control node.
func (l *Ledger) RequestApproval(ctx context.Context, h enroll.TokenHash, p enroll.PendingJoin) error {
	p.Via = l.p.cfg.Name
	return l.p.Write(ctx, &state.RequestApproval{Hash: h, Pending: p, At: l.p.now().UTC(), Actor: l.p.self()})
}

// Approve is an operator's (actor's) code for the join of name that waits
// for approval: it approves the waiting session that shows code, or counts
// a wrong code (codes.ApprovalWrongCode, with the attempts left; the
// fifth burns the token: codes.ApprovalBurnt). No join of name waiting is
// codes.ApprovalNotPending; a code that is not 6 digits,
// codes.BadRequest (not counted).
func (p *Plane) Approve(ctx context.Context, req apitype.ApproveRequest, actor string) (*apitype.ApproveResponse, error) {
	code, err := enroll.ParseCode(req.Code)
	if err != nil {
		return nil, err
	}
	if err := enroll.ValidName(req.Name); err != nil {
		return nil, err
	}
	// A read index: the join may wait on another control node, which
	// recorded it a moment ago.
	if err := p.SyncRead(ctx); err != nil {
		return nil, err
	}
	rec, err := p.waitingToken(req.Name, code)
	if err != nil {
		return nil, err
	}
	mine := enroll.HashCode(rec.Hash, code)
	if err := p.Write(ctx, &state.ApproveJoin{Hash: rec.Hash, Code: mine, At: p.now().UTC(), Actor: actor}); err != nil {
		return nil, err
	}
	// The FSM counted the code or approved it: read which, once this node
	// has applied the entry.
	if err := p.SyncRead(ctx); err != nil {
		return nil, err
	}
	got, _ := p.raft.FSM().Token(rec.Hash)
	a := got.Approval
	switch {
	case a.IsApproved() && a.Approved.Code == mine:
		p.log.Info("join approved", "code", codes.EventJoinApproved, "name", got.Name, "token_id", tokenID(got.Hash),
			"source", a.Approved.Source, "via", a.Approved.Via, "actor", actor)
		return &apitype.ApproveResponse{Name: got.Name, TokenID: tokenID(got.Hash), Source: a.Approved.Source,
			Via: a.Approved.Via, Actor: actor}, nil
	case a.IsBurnt():
		p.log.Warn("wrong approval code: the token is burnt", "code", codes.ApprovalBurnt, "name", got.Name,
			"token_id", tokenID(got.Hash), "wrong", a.Wrong, "actor", actor)
		return nil, codes.Wrap(codes.ApprovalBurnt, fmt.Errorf("wrong code %d of %d for the join of %s: token %s is burnt, no join with it can be approved",
			a.Wrong, enroll.ApprovalMaxWrong, got.Name, tokenID(got.Hash)))
	}
	p.log.Warn("wrong approval code", "code", codes.ApprovalWrongCode, "name", got.Name, "token_id", tokenID(got.Hash),
		"wrong", a.Wrong, "actor", actor)
	return nil, codes.Wrap(codes.ApprovalWrongCode, fmt.Errorf("no join of %s waiting for approval shows that code (%s); wrong code %d of %d, %d left before token %s is burnt",
		got.Name, waitingFrom(a), a.Wrong, enroll.ApprovalMaxWrong, enroll.ApprovalMaxWrong-a.Wrong, tokenID(got.Hash)))
}

// waitingToken is the token of name whose join waits for approval with
// code: of the unused tokens minted with --approve that have a waiting
// session (an operator may have minted more than one for a name), the
// one a session of which shows code, else the newest (the code then
// counts as wrong there).
func (p *Plane) waitingToken(name, code string) (enroll.TokenRecord, error) {
	var (
		found enroll.TokenRecord
		ok    bool
	)
	now := p.now()
	for _, r := range p.raft.FSM().Tokens() { // oldest first
		if r.Name == name && r.Approve && !r.Consumed() && !r.Revoked() && now.Before(r.Expires) &&
			len(r.Approval.Pending) > 0 && !r.Approval.IsApproved() {
			if r.Approval.Waits(enroll.HashCode(r.Hash, code)) {
				return r, nil
			}
			found, ok = r, true
		}
	}
	if !ok {
		return enroll.TokenRecord{}, codes.Wrap(codes.ApprovalNotPending,
			fmt.Errorf("no join of %s waits for approval: start `meshctl join` with a token minted by `meshctl admit %s --approve`, "+
				"then approve the code it shows; `meshctl tokens` shows what waits", name, name))
	}
	return found, nil
}

// waitingFrom names where the waiting joins come from.
func waitingFrom(a enroll.Approval) string {
	if len(a.Pending) == 0 {
		return "none waits now"
	}
	s := "waiting: "
	for i, w := range a.Pending {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("from %s via %s", w.Source, w.Via)
	}
	return s
}

// approvalRow is a token row's approval state at now (nil for a token
// minted without --approve).
func approvalRow(t enroll.TokenRecord) *apitype.TokenApproval {
	if !t.Approve {
		return nil
	}
	a := t.Approval
	row := &apitype.TokenApproval{State: apitype.ApprovalStateNone, Wrong: a.Wrong}
	switch {
	case a.IsBurnt():
		row.State = apitype.ApprovalStateBurnt
	case a.IsApproved():
		row.State, row.ApprovedBy, row.Source = apitype.ApprovalStateApproved, a.ApprovedBy, a.Approved.Source
	case len(a.Pending) > 0:
		row.State = apitype.ApprovalStateWaiting
	}
	if !a.IsApproved() && !a.IsBurnt() {
		for _, w := range a.Pending {
			row.Waiting = append(row.Waiting, apitype.ApprovalWaiting{Source: w.Source, Via: w.Via, Since: w.Since})
		}
	}
	return row
}

// WaitingApprovals are the joins that wait for approval, from this node's
// FSM (no read index: for `meshctl status`).
func (p *Plane) WaitingApprovals() []apitype.WaitingJoin {
	var out []apitype.WaitingJoin
	now := p.now()
	for _, r := range p.raft.FSM().Tokens() {
		if !r.Approve || r.Consumed() || r.Revoked() || !now.Before(r.Expires) || r.Approval.IsApproved() {
			continue
		}
		for _, w := range r.Approval.Pending {
			out = append(out, apitype.WaitingJoin{Name: r.Name, TokenID: tokenID(r.Hash), Source: w.Source, Via: w.Via,
				Since: w.Since, Expires: r.Expires})
		}
	}
	return out
}
