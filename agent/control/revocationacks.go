package control

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// RevocationQueryName is the gossip query a removal asks every member:
// "do you block what the revocation list version v revokes?"
const RevocationQueryName = "meshd-revocation"

// DefaultRevocationAckTimeout bounds how long a removal waits for the
// members' acknowledgements.
const DefaultRevocationAckTimeout = 5 * time.Second

// MaxRevocationAckTimeout caps the bound an operator may ask for.
const MaxRevocationAckTimeout = time.Minute

// RevocationQuery is the query's payload (Version, and a fresh Nonce),
// and a member's answer: the revocation list version (its length, which
// only grows), its node ID and Sig, its pki.Attest of RevokedStatement
// bound to the nonce. The previous release asks without a nonce and
// answers with the version alone.
type RevocationQuery struct {
	Version int    `json:"v"`
	Nonce   []byte `json:"n,omitempty"`
	ID      string `json:"id,omitempty"`
	Sig     []byte `json:"sig,omitempty"`
}

// RevocationVersion is the version of the revocation list raft holds.
func (p *Plane) RevocationVersion() int { return len(p.raft.FSM().Revocations()) }

// RemoveAndConfirm removes name (Remove) and then shows convergence: it
// asks every member over gossip to acknowledge the revocation list
// version that holds the removal, waits up to bound (zero: the configured
// RevocationAckTimeout) for every active member to answer, and records
// who did and who did not (RecordRevocationAcks), so `meshctl nodes`
// shows it on every control node. The removal stands either way; members
// that did not answer are listed as pending, with a RevocationPending
// warning. The removed node's own answer is ignored.
func (p *Plane) RemoveAndConfirm(ctx context.Context, name, actor string, bound time.Duration) (*apitype.RemoveResponse, error) {
	return p.removeAndConfirm(ctx, name, "", actor, bound)
}

// removeAndConfirm is RemoveAndConfirm; with id set, of the node id only
// (removeNode).
func (p *Plane) removeAndConfirm(ctx context.Context, name, id, actor string, bound time.Duration) (*apitype.RemoveResponse, error) {
	n, err := p.removeNode(ctx, name, id, actor)
	if err != nil {
		return nil, err
	}
	if bound <= 0 {
		bound = p.cfg.revocationAckTimeout()
	}
	bound = min(bound, MaxRevocationAckTimeout)
	resp := p.confirmRevocation(ctx, n, bound, actor)
	return resp, nil
}

func (p *Plane) confirmRevocation(ctx context.Context, removed state.Node, bound time.Duration, actor string) *apitype.RemoveResponse {
	version := p.RevocationVersion()
	expect := map[string]state.Node{}
	for _, n := range p.raft.FSM().Nodes() {
		// A stock Nebula member runs no meshd to acknowledge: nothing
		// tells its nebula of a revocation (docs/security.md, "Stock
		// Nebula members").
		if n.State == state.NodeActive && n.ID != removed.ID && n.Name != removed.Name && n.Role != pki.RoleNebula {
			expect[n.Name] = n
		}
	}
	wait := poolMembers(expect, p.hooks.Gossip()) // outofpool.go: a worker out of the pool answers by its record
	legacy := map[string]bool{}                   // the previous release signs nothing (KeyReport.Legacy)
	for _, r := range p.hooks.KeyReports() {
		legacy[r.Name] = r.Legacy
	}
	resp := &apitype.RemoveResponse{Name: removed.Name, Version: version, Bound: bound, Acked: []string{}, Pending: []string{}}
	nonce := newQueryNonce()
	payload, _ := json.Marshal(RevocationQuery{Version: version, Nonce: nonce})
	start := time.Now()
	var mu sync.Mutex // acked and resp.LastAck: the gossip answers and the records' watch fill them at once
	acked := map[string]bool{}
	records := p.watchRecordAcks(ctx, byRecord(expect, wait), version, bound, func(name string) {
		mu.Lock()
		defer mu.Unlock()
		acked[name], resp.LastAck = true, time.Since(start)
	})
	done := func(answers map[string][]byte) bool {
		mu.Lock()
		defer mu.Unlock()
		for from, b := range answers {
			var a RevocationQuery
			n, ok := expect[from]
			if !ok || acked[from] || json.Unmarshal(b, &a) != nil || a.Version < version {
				continue
			}
			// Signed by the member's recorded key: nobody acknowledges
			// for another node (issue 27).
			if !legacy[from] && (a.ID != n.ID || !attested(n, pki.AttestRevoked, nonce, RevokedStatement(n.ID, a.Version), a.Sig)) {
				continue
			}
			acked[from] = true
			resp.LastAck = time.Since(start)
		}
		for name := range wait {
			if !acked[name] {
				return false
			}
		}
		return true
	}
	var err error
	if len(wait) > 0 {
		_, err = p.hooks.AskMembers(ctx, RevocationQueryName, payload, bound, done)
	}
	if err != nil {
		p.log.Warn("could not ask the members to acknowledge the revocation", "code", codes.RevocationPending, "err", err)
	}
	<-records // both done: nothing fills acked any more
	for name := range expect {
		if acked[name] {
			resp.Acked = append(resp.Acked, name)
		} else {
			resp.Pending = append(resp.Pending, name)
		}
	}
	slices.Sort(resp.Acked)
	slices.Sort(resp.Pending)
	if len(resp.Pending) > 0 {
		resp.Warnings = append(resp.Warnings, apitype.Warning{Code: codes.RevocationPending,
			Detail: "pending: " + strings.Join(resp.Pending, ", ")})
	}
	p.log.Info("revocation acknowledgements", "code", codes.EventRevocationAcks, "node", removed.Name, "version", version,
		"acked", len(resp.Acked), "pending", resp.Pending, "last_ack", resp.LastAck)
	rec := &state.RecordRevocationAcks{Ack: state.RevocationAck{NodeID: removed.ID, Version: version,
		Acked: resp.Acked, Pending: resp.Pending, At: p.now()}, Actor: actor}
	// The record outlives the caller's patience: a cancelled request still
	// leaves the round on record.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	if err := p.Write(wctx, rec); err != nil {
		p.log.Warn("revocation acknowledgements not recorded", "code", codes.OrInternal(err), "node", removed.Name, "err", err)
	}
	return resp
}

// RevocationSummary is how `meshctl nodes` shows a removal's round:
// "acknowledged", or "pending: " and the names that did not answer.
func RevocationSummary(pending []string) string {
	if len(pending) == 0 {
		return "acknowledged"
	}
	return "pending: " + strings.Join(pending, ", ")
}

// errNoGossip is AskMembers without gossip (a plane built without hooks).
var errNoGossip = errors.New("no gossip to ask the members over")
