package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// A member's facts by the internal API (issue 54 item 3, before workers
// leave the gossip pool): the meshd version it runs and its signed CA
// report, which control nodes read from its gossip tags ("ver", "ca",
// "cas") and decide by (nodeRows, caLaggers). A member POSTs them to any
// control node when one changes (at start, a CA bundle adopted, a
// certificate reissued: agent/member/factreport.go), beside the tags.
// Who it is comes from its leaf (the guard), never from the body; the CA
// report counts only with its signature by the TLS key raft recorded for
// it (attested, as caLaggers checks gossip's): else FactsRefused and
// nothing written. A report the record already holds writes nothing.
// The others wait for this control node's next raft write, applied here: one SetFacts
// entry holds every report received in a factWindow (at most
// maxFactsBatch a entry), forwarded to the leader as every write is.
//
// Cost at 10,000 members: a CA rotation makes every member report twice
// (the bundle adopted, then its certificates reissued): 20,000 POSTs
// spread by the members' jitter (factJitter), each a signature check on
// the control node that takes it and again on the leader, and about
// 20,000 / maxFactsBatch entries when they arrive at once, one entry per
// factWindow per control node when they trickle in. No loop here runs
// while no report is pending: the first report of a window arms its
// write.
const (
	PathSelfFacts = "/v1/self/facts"

	// factWindow is how long reports gather before their raft write.
	factWindow = 200 * time.Millisecond
	// maxFactsBatch caps one entry (a change is about 250 bytes).
	maxFactsBatch = 2048
	// maxFactLen caps a version or a CA report; maxFactSig a signature.
	maxFactLen = 256
	maxFactSig = 512
)

// FactsRequest is what a member POSTs to PathSelfFacts: the version it
// runs and CAReport of what it runs with its pki.Attest of CAStatement
// (kind pki.AttestCA, nonce its node id); a worker out of the gossip pool
// also its NAT, that it is out of the pool, and the revocation list
// version its Nebula blocks (poolfacts.go). An empty field says nothing.
type FactsRequest struct {
	Version string `json:"version,omitempty"`
	CA      string `json:"ca,omitempty"`
	CASig   []byte `json:"ca_sig,omitempty"`
	NAT     string `json:"nat,omitempty"`
	Pool    string `json:"pool,omitempty"`
	Revoked int    `json:"revoked,omitempty"`
}

// factBatch gathers the reports of one window.
type factBatch struct {
	mu      sync.Mutex
	pending map[string]state.FactChange // by node id; a newer report replaces an older
	round   *factRound
	writes  int // raft writes made (tests)
}

// factRound is one window's write, which its reporters wait for.
type factRound struct {
	done chan struct{}
	err  error
}

// handleSelfFacts checks the caller's report and waits for its write.
func (p *Plane) handleSelfFacts(w http.ResponseWriter, r *http.Request, c Caller) {
	var req FactsRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := p.reportFacts(r.Context(), c.NodeID, req); err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, Empty{})
}

// ReportOwnFacts is a control node's report of its own facts: the same
// checks and batch as a member's POST, without the call.
func (p *Plane) ReportOwnFacts(ctx context.Context, req FactsRequest) error {
	return p.reportFacts(ctx, p.cfg.NodeID, req)
}

// reportFacts checks id's report against its record and queues it.
func (p *Plane) reportFacts(ctx context.Context, id string, req FactsRequest) error {
	if len(req.Version) > maxFactLen || len(req.CA) > maxFactLen || len(req.CASig) > maxFactSig {
		return codes.Wrap(codes.BadRequest, errors.New("facts report: a field is too long"))
	}
	if err := p.revokedTooFar(req.Revoked); err != nil {
		return err
	}
	n, ok := p.raft.FSM().Node(id)
	if !ok || n.State != state.NodeActive {
		return codes.Wrap(codes.NotMember, fmt.Errorf("facts report: %s is not an active member", id))
	}
	ch := state.FactChange{NodeID: id, Version: req.Version, CA: req.CA, CASig: req.CASig, NAT: req.NAT, Pool: req.Pool, Revoked: req.Revoked}
	if err := checkFact(n, ch); err != nil {
		return err
	}
	if ch.Holds(n) {
		return nil
	}
	return p.queueFact(ctx, ch)
}

// checkFact is FactsRefused unless ch's CA report, if any, is n's own
// signed statement, and its pool facts are words a node may say of
// itself (checkPoolFacts).
func checkFact(n state.Node, ch state.FactChange) error {
	if err := checkPoolFacts(n, ch); err != nil {
		return err
	}
	if ch.CA == "" {
		return nil
	}
	if !attested(n, pki.AttestCA, []byte(n.ID), CAStatement(ch.CA), ch.CASig) {
		return codes.Wrap(codes.FactsRefused, fmt.Errorf("the CA report of %s is not signed by its recorded TLS key", n.Name))
	}
	return nil
}

// queueFact adds ch to this window's batch, arming its write if it is
// the first, and waits for that write.
func (p *Plane) queueFact(ctx context.Context, ch state.FactChange) error {
	select {
	case <-p.stop: // closing: no write is armed any more
		return codes.Wrap(codes.NoLeader, errors.New("this control node is stopping"))
	default:
	}
	b := &p.facts
	b.mu.Lock()
	if b.round == nil {
		b.pending, b.round = map[string]state.FactChange{}, &factRound{done: make(chan struct{})}
		p.wg.Add(1)
		time.AfterFunc(factWindow, p.flushFacts)
	}
	b.pending[ch.NodeID] = ch
	r := b.round
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return codes.Wrap(codes.NoLeader, fmt.Errorf("facts report not written yet: %w", ctx.Err()))
	}
}

// flushFacts writes the window's batch, in entries of maxFactsBatch.
func (p *Plane) flushFacts() {
	defer p.wg.Done()
	b := &p.facts
	b.mu.Lock()
	pending, r := b.pending, b.round
	b.pending, b.round = nil, nil
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	go func() { // a stopping plane does not wait out writeTimeout
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	changes := make([]state.FactChange, 0, len(pending))
	for _, ch := range pending {
		changes = append(changes, ch)
	}
	slices.SortFunc(changes, func(a, b state.FactChange) int { return cmp.Compare(a.NodeID, b.NodeID) })
	for part := range slices.Chunk(changes, maxFactsBatch) {
		err := p.WriteApplied(ctx, state.SetFacts{Changes: part, Actor: NodeActor(p.cfg.Name).String()})
		b.mu.Lock()
		b.writes++
		b.mu.Unlock()
		if err != nil {
			p.log.Warn("members' facts not written; they report again", "reports", len(part), "code", codes.OrInternal(err), "err", err)
			r.err = err
		}
	}
	close(r.done)
}

// factsRule: the leader checks every CA report of a forwarded batch
// against its node's record, as the control node that took it did.
func factsRule(p *Plane, _ Caller, cmd state.Command) error {
	for _, ch := range cmd.(state.SetFacts).Changes {
		n, ok := p.raft.FSM().Node(ch.NodeID)
		if !ok {
			continue // skipped by the FSM
		}
		if err := checkFact(n, ch); err != nil {
			return err
		}
	}
	return nil
}

// caReportOf is n's CA report as caLaggers reads it: raft's record when
// the node reported by the internal API, else its gossip tags'.
func caReportOf(n state.Node, gossip map[string]KeyReport) (KeyReport, bool) {
	if n.CAReport != "" {
		return KeyReport{Name: n.Name, ID: n.ID, CA: n.CAReport, CASig: n.CAReportSig}, true
	}
	r, ok := gossip[n.Name]
	return r, ok
}
