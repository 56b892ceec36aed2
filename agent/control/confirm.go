package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// A joining node becomes active when it confirms its join (POST
// /v1/self/confirm, after DESIGN §6 step 10 passed on the joiner); one
// that has not within Config.JoinBound of its admission is failed by the
// raft leader's sweep.

// DefaultJoinBound is how long a node may stay joining before the leader
// records its join failed: twice the joiner's own confirmation timeout
// (agent's joinConfirmTimeout, 30 s), so that a join the joiner still
// counts as in progress is never failed under it.
const DefaultJoinBound = 60 * time.Second

func (c Config) joinBound() time.Duration {
	if c.JoinBound <= 0 {
		return DefaultJoinBound
	}
	return c.JoinBound
}

// ConfirmJoin is a joiner's side: once its join is confirmed (a control
// node promoted to voter, gossip alive, a lighthouse reached) it asks a
// control node in seeds to record it active. The confirmation is
// repeatable (a second one is a no-op), so an answer that only says no
// leader could be reached (codes.NoLeader, or no seed answered), or that
// the seed cannot serve now (codes.SeedUnfit: its disk fails, so its raft
// cannot keep up), is asked again, of the next seed first, until ctx
// ends; any other answer is final. Found by e2e.TestJoinBurst50 with both cores busy: a follower
// whose read index did not come back within 5 s answered NoLeader, and
// the join failed (JoinUnconfirmed) 8 s in, with 22 s of its
// confirmation time left.
func (c *Client) ConfirmJoin(ctx context.Context, seeds []string, nodeID string) error {
	backoff := 50 * time.Millisecond
	for k := 0; ; k++ {
		err := c.PostSeeds(ctx, rotated(seeds, k), PathConfirm, NodeRef{NodeID: nodeID}, nil)
		if !retryable(err) && codes.Of(err) != codes.SeedUnfit {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// handleConfirm records the calling joining node active. A worker's
// confirmation is judged by the FSM's compare-and-set alone (confirmable
// checks nothing else for it), so a read index first is needed only for
// a control node (this node's view of raft's configuration) or a caller
// this node has no record of yet: a worker confirming at the seed it
// enrolled through saves that round trip (100 ms on TestSites' far site).
func (p *Plane) handleConfirm(w http.ResponseWriter, r *http.Request, c Caller) {
	if n, ok := p.raft.FSM().Node(c.NodeID); !ok || n.Role == pki.RoleControl {
		if err := p.SyncRead(r.Context()); err != nil {
			writeError(w, err)
			return
		}
	}
	if err := p.confirmableSoon(r.Context(), c.NodeID); err != nil {
		writeError(w, err)
		return
	}
	if err := p.Write(r.Context(), &state.ConfirmJoin{NodeID: c.NodeID, At: p.now(), Actor: "node:" + c.NodeID}); err != nil {
		writeError(w, err)
		return
	}
	p.hooks.Poke()
	// Workers learn the new active record from their node list: have
	// them fetch it (and the revocation list) now, not at their next tick.
	if err := p.hooks.NotifyRevoked(); err != nil {
		p.log.Debug("could not tell the workers about the confirmed join; they see it on their next tick", "err", err)
	}
	p.log.Info("join confirmed", "code", codes.EventNodeActive, "node", c.Name, "node_id", c.NodeID)
	apitype.WriteJSON(w, http.StatusOK, Empty{})
}

// confirmable checks, on this node's view, what the FSM cannot: a control
// node is confirmed only once raft's configuration lists it as a voter.
// The FSM's compare-and-set decides the rest (joining, certificates
// recorded, not failed).
func (p *Plane) confirmable(id string) error {
	n, ok := p.raft.FSM().Node(id)
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %s", id))
	}
	if n.State == state.NodeJoining && n.Role == pki.RoleControl && !p.raft.IsVoter(id) {
		return codes.Wrap(codes.JoinUnconfirmed, fmt.Errorf("control node %s is not a raft voter yet", n.Name))
	}
	return nil
}

// confirmVoterWait bounds how long a confirmation waits for this node's
// view of raft's configuration to list the joining control node as a
// voter.
const confirmVoterWait = 2 * time.Second

// confirmableSoon is confirmable, waiting up to confirmVoterWait while
// the only objection is that raft's configuration here does not list the
// control node as a voter yet. The joiner asks only once it saw itself
// promoted, but this node's view may lag: a promotion cut short by a
// leadership change is finished by the next leader, whose configuration
// entry reaches the other voters a heartbeat later. Found by
// control.TestGateRefusesRemovedNodes under load ("c3 confirms its join:
// control node c3 is not a raft voter yet").
func (p *Plane) confirmableSoon(ctx context.Context, id string) error {
	deadline := time.Now().Add(confirmVoterWait)
	for {
		err := p.confirmable(id)
		if codes.Of(err) != codes.JoinUnconfirmed || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(leaderPoll):
		}
	}
}

// confirmRule: a forwarded ConfirmJoin passes the leader's own check.
func confirmRule(p *Plane, _ Caller, cmd state.Command) error {
	return p.confirmable(cmd.(state.ConfirmJoin).NodeID)
}

// failJoinRule: a forwarded FailJoin (a sweep whose leader lost
// leadership as it wrote) must name a node joining for longer than the
// bound by this leader's clock.
func failJoinRule(p *Plane, _ Caller, cmd state.Command) error {
	f := cmd.(state.FailJoin)
	n, ok := p.raft.FSM().Node(f.NodeID)
	now := p.now()
	p.joinAges.observe(p.raft.FSM().Nodes(), now)
	if !ok || n.State != state.NodeJoining || p.joinAges.age(n.ID, now) < p.cfg.joinBound() {
		return fmt.Errorf("node %s is not a join past its bound", f.NodeID)
	}
	return nil
}

// FailStaleJoins times every joining node on this node's clock
// (joinAges) and, on the raft leader only, records each one seen joining
// for bound or longer failed, with its cause. The time travels in the
// command.
func (p *Plane) FailStaleJoins(ctx context.Context, now time.Time, bound time.Duration) int {
	nodes := p.raft.FSM().Nodes()
	p.joinAges.observe(nodes, now)
	if !p.raft.LeaderReady() { // its FSM holds every entry before its term (raftnode/ready.go)
		return 0
	}
	failed := 0
	for _, n := range nodes {
		if n.State != state.NodeJoining || p.joinAges.age(n.ID, now) < bound {
			continue
		}
		cause := joinFailCause(n, p.raft.IsVoter(n.ID), bound)
		if err := p.Write(ctx, &state.FailJoin{NodeID: n.ID, Cause: cause, At: now, Actor: p.self()}); err != nil {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("could not record a failed join", "code", codes.OrInternal(err), "node", n.Name, "err", err)
			}
			continue
		}
		failed++
		p.log.Warn("join failed: not confirmed in time; the node's certificates are revoked", "code", codes.EventJoinFailed,
			"node", n.Name, "node_id", n.ID, "cause", cause)
		if n.Role == pki.RoleControl && p.raft.IsMember(n.ID) {
			// A control node that got into raft but never confirmed is no
			// member: take it out again, as an unpromoted one is.
			if err := p.raftRemove(ctx, Caller{NodeID: p.cfg.NodeID, Name: p.cfg.Name}, RaftRemoveRequest{NodeID: n.ID}); err != nil {
				p.log.Warn("could not remove the failed joiner from raft", "node", n.Name, "err", err)
			}
		}
	}
	if failed > 0 {
		p.hooks.Poke()
		if err := p.hooks.NotifyRevoked(); err != nil {
			p.log.Warn("could not tell the cluster about the revocation; workers pick it up on their next tick", "err", err)
		}
	}
	return failed
}

// joinFailCause says which step of the join did not happen.
func joinFailCause(n state.Node, voter bool, bound time.Duration) string {
	switch {
	case n.TLSFingerprint == "":
		return fmt.Sprintf("no certificates were recorded within %s of the admission (signing failed and was not undone)", bound)
	case n.Role == pki.RoleControl && !voter:
		return fmt.Sprintf("not promoted to raft voter within %s of the admission", bound)
	default:
		return fmt.Sprintf("the joiner did not confirm its join (gossip, overlay) within %s of the admission", bound)
	}
}

// watchJoins runs the sweep of stale joins until stop, at a quarter of
// bound, on every control node (each times the joins it sees; the leader
// fails the stale ones), so a join fails at most 1.5 bounds after its
// admission. It takes bound and the clock once, from New: nothing it
// reads is changed after.
func (p *Plane) watchJoins(stop <-chan struct{}, bound time.Duration, now func() time.Time) {
	t := time.NewTicker(bound / 4)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), bound/4)
		p.FailStaleJoins(ctx, now(), bound)
		cancel()
	}
}
