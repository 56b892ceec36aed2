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
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Remove takes a dead or unwanted node out of the cluster: out of raft
// (control), its record set to removed, which revokes its certificates so
// every Nebula blocks them, and out of gossip. A node does not remove
// itself, and the CA holder cannot be removed.
func (p *Plane) Remove(ctx context.Context, name, actor string) error {
	_, err := p.remove(ctx, name, actor)
	return err
}

// remove is Remove, returning the removed node's record (as it was).
func (p *Plane) remove(ctx context.Context, name, actor string) (state.Node, error) {
	return p.removeNode(ctx, name, "", actor)
}

// removeNode is remove; with id set, only while name is still the name
// of the node id (the ephemeral reaper decided on that record, and the
// name may have passed to another node since): codes.NodeUnknown
// otherwise. Without id, a name no current node holds names the most
// recent former record of it (left, removed or failed): removing it again
// revokes whatever it held that is not revoked yet and changes nothing
// else (issue 52: on main `remove b1` after b1 left said NodeUnknown).
func (p *Plane) removeNode(ctx context.Context, name, id, actor string) (state.Node, error) {
	if err := p.SyncRead(ctx); err != nil {
		return state.Node{}, err
	}
	n, ok := p.raft.FSM().NodeByName(name)
	if !ok && id == "" {
		n, ok = p.raft.FSM().FormerNode(name)
	}
	if !ok || (id != "" && n.ID != id) {
		return state.Node{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node named %q", name))
	}
	if n.ID == p.cfg.NodeID {
		return state.Node{}, codes.Wrap(codes.BadRequest, errors.New("a node does not remove itself; run `meshctl leave` on it"))
	}
	if c, ok := p.raft.FSM().Cluster(); ok && c.CAHolder == n.ID {
		return state.Node{}, codes.Wrap(codes.CAHolderStays, fmt.Errorf("%s holds the CA", n.Name))
	}
	former := n.State.Former()
	if n.Role == pki.RoleControl {
		// The leader drops it from raft and records it removed, audited
		// with actor (raftRemove); a former one it only drops from raft
		// if it is still there.
		if err := p.removeFromRaft(ctx, n.ID, actor); err != nil {
			return state.Node{}, err
		}
	}
	if n.Role != pki.RoleControl || former {
		if err := p.Write(ctx, &state.SetNodeState{NodeID: n.ID, State: state.NodeRemoved, At: p.now(), Actor: actor}); err != nil {
			return state.Node{}, err
		}
	}
	p.departed(ctx, n)
	p.log.Info("node removed and its certificates revoked", "code", codes.EventNodeRemoved, "node", n.Name, "actor", actor, "was", n.State)
	if former {
		// Its gossip keys were owed when it departed; the debt is paid
		// by the rotation loop (keysowed.go).
		return n, nil
	}
	// A removed node may hold the gossip key: rotate it away.
	_, err := p.RotateKeys(ctx, actor)
	// And tell serf again. A removed node that keeps running refutes a
	// leave intent about itself while it can still read and write the
	// cluster's gossip (serf rebroadcasts its join), so the first one may
	// have left it alive in serf; after the rotation it can do neither.
	// serf then holds it leaving, and left (not failed, so never
	// reconnected to) once memberlist stops hearing from it. Members show
	// it left before that: their gossip view follows raft's record
	// (desired.View).
	p.forceLeave(n.Name)
	if err != nil {
		return state.Node{}, fmt.Errorf("%s removed, but the gossip key was not rotated: %w", n.Name, err)
	}
	return n, nil
}

// departed is what follows a departure this node had raft record (a
// removal, a leave, issue 52: one transition, one path): the members
// look again at once (Poke, the revocation notice), tokens naming a
// departed control node as a seed are revoked, and gossip hears it left.
func (p *Plane) departed(ctx context.Context, n state.Node) {
	p.hooks.Poke()
	if err := p.hooks.NotifyRevoked(); err != nil {
		p.log.Warn("could not tell the cluster about the revocation; workers pick it up on their next tick", "err", err)
	}
	if n.Role == pki.RoleControl {
		p.sweepSeedTokens(ctx) // its leaf stays valid: no unused token may lead a joiner to it
	}
	p.forceLeave(n.Name)
}

// forceLeave has gossip broadcast that name left for good. serf waits
// for the broadcast (up to 5 s when the node is alive and refutes it);
// the removal does not need to.
func (p *Plane) forceLeave(name string) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.hooks.ForceLeave(name); err != nil {
			p.log.Warn("gossip force-leave failed", "node", name, "err", err)
		}
	}()
}

// LeaveVoterCheck refuses to let this node leave when it is the last raft
// voter (codes.QuorumLoss); the leader checks the rest (quorumAfterRemoving)
// when this node asks it to drop it from raft.
func (p *Plane) LeaveVoterCheck() error {
	if p.raft.IsVoter(p.cfg.NodeID) && p.raft.Voters() <= 1 {
		return codes.Wrap(codes.QuorumLoss, errors.New("this is the last raft voter"))
	}
	return nil
}

// RecordLeft has another control node record this node left (POST
// /v1/self/left, as a worker does): that node revokes every certificate
// this one held and asks the members to acknowledge they block it, which
// this node, cut off by its own revocation, could not ask itself. actor
// is the operator who asked (an Actor's text); keep, if set, the token
// this node's own `join --force` will use (LeftRequest.Keep).
func (p *Plane) RecordLeft(ctx context.Context, actor string, keep enroll.TokenHash) (apitype.RemoveResponse, error) {
	var others []string
	leader := ""
	for _, n := range p.raft.FSM().Nodes() {
		if n.Role == pki.RoleControl && n.State == state.NodeActive && n.ID != p.cfg.NodeID && n.EnrollAddr != "" {
			others = append(others, n.EnrollAddr)
			if n.ID == p.raft.LeaderID() {
				leader = n.EnrollAddr
			}
		}
	}
	// The leader first: it dropped this node from raft, so its
	// configuration already says this node is out (a follower that has
	// not applied the change yet would refuse the leave as premature).
	var out apitype.RemoveResponse
	err := p.client.PostSeeds(ctx, HomeFirst(others, leader, p.cfg.NodeID), PathLeft, LeftRequest{NodeID: p.cfg.NodeID, Actor: actor, Keep: keep}, &out)
	return out, err
}

// LeaveRaft hands leadership off if this node leads, then has the leader
// drop this node from raft membership.
func (p *Plane) LeaveRaft(ctx context.Context) error {
	if p.raft.IsLeader() {
		// Refuse before handing leadership off for nothing.
		if err := p.quorumAfterRemoving(ctx, p.cfg.NodeID); err != nil {
			return err
		}
	}
	if err := p.raft.HandOff(); err != nil {
		p.log.Warn("leadership transfer before leaving failed", "err", err)
	}
	// A leader that just handed leadership off knows no leader until the
	// new one's first heartbeat: asking then failed NoLeader at once
	// (found by e2e.TestCAHandoff, the first test where the leader leaves).
	p.awaitKnownLeader(ctx, 10*time.Second)
	return p.removeFromRaft(ctx, p.cfg.NodeID, "")
}

// awaitKnownLeader returns once this node knows a raft leader, or after
// bound (the caller then meets NoLeader itself).
func (p *Plane) awaitKnownLeader(ctx context.Context, bound time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for p.raft.LeaderID() == "" {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// removeFromRaft has the leader drop id from raft membership (actor, an
// Actor's text, is who asked, for the audit trail when the node is
// removed by it: raftRemove). A leader that loses its leadership mid-way
// answers NoLeader; the removal is repeatable (a non-member's is a
// no-op), so it is asked again of whoever leads next until ctx ends
// (untilLeaderAnswers).
func (p *Plane) removeFromRaft(ctx context.Context, id, actor string) error {
	req := RaftRemoveRequest{NodeID: id, Actor: actor}
	self := Caller{NodeID: p.cfg.NodeID, Name: p.cfg.Name}
	return untilLeaderAnswers(ctx, func() error {
		return p.onLeader(ctx, PathRaftRemove, req, nil, func() error { return p.raftRemove(ctx, self, req) })
	})
}

// raftRemove drops a server from raft on the leader, for caller. What is
// asked is checked, not only who asks (issue 27 item 6: any control node
// could drop the CA holder from raft with its record still active, no
// audit event, CAHolderStays bypassed):
//
//   - the CA holder is never dropped (CAHolderStays);
//   - a server with no record is refused; a record's own node (it
//     leaves), or one already removed, left or failed, is dropped;
//   - any other record is a removal: it is dropped, then recorded
//     removed (audited with the caller's operator or the caller, its
//     certificates revoked), as `meshctl remove` does; asked again once
//     the server is gone, it records what is not recorded yet;
//
// and never when fewer than a majority of the voters left would be
// reachable (codes.QuorumLoss).
func (p *Plane) raftRemove(ctx context.Context, caller Caller, req RaftRemoveRequest) error {
	member := p.raft.IsMember(req.NodeID)
	n, ok := p.raft.FSM().Node(req.NodeID)
	if !ok {
		if !member {
			return nil // nothing to do
		}
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("raft server %s has no node record; not dropped", req.NodeID))
	}
	if c, ok := p.raft.FSM().Cluster(); ok && c.CAHolder == n.ID {
		return codes.Wrap(codes.CAHolderStays, fmt.Errorf("%s holds the CA; hand custody off before it leaves raft", n.Name))
	}
	removal := n.ID != caller.NodeID && (n.State == state.NodeActive || n.State == state.NodeJoining)
	if member {
		if err := p.quorumAfterRemoving(ctx, n.ID); err != nil {
			return err
		}
		if err := p.raft.RemoveServer(n.ID, 10*time.Second); err != nil {
			return err
		}
		p.log.Info("raft server dropped", "node", n.Name, "state", n.State, "asked_by", caller.Name)
		if removal && n.ID == p.cfg.NodeID {
			// This leader dropped itself: the next leader records the
			// removal when asked again (it finds the server gone).
			return codes.Wrap(codes.NoLeader, errors.New("the leader left raft; the next one records the removal"))
		}
	}
	if !removal {
		return nil
	}
	// The actor binds to the caller's authenticated name, as a forwarded
	// write's does (forwardedActor): its own operator, or itself.
	actor := NodeActor(caller.Name).String()
	if a, ok := ParseActor(req.Actor); ok && a.Via == "" && a.Node == caller.Name {
		actor = a.String()
	}
	return p.Write(ctx, &state.SetNodeState{NodeID: n.ID, State: state.NodeRemoved, At: p.now(), Actor: actor})
}

// handleRaftRemove is the leader's side of removeFromRaft.
func (p *Plane) handleRaftRemove(w http.ResponseWriter, r *http.Request, c Caller) {
	var req RaftRemoveRequest
	p.leaderOnly(w, r, &req, func() error { return p.raftRemove(r.Context(), c, req) })
}

// handleLeft records the calling member as left, with the operator it
// names on itself as the actor, relayed by this node (relayedActor). A
// leave is a departure like a removal (issue 52): every certificate the
// caller held is revoked, and the answer comes once the members have
// acknowledged that they block it (or the bound passed): the same round,
// recorded the same way, as `meshctl remove`.
func (p *Plane) handleLeft(w http.ResponseWriter, r *http.Request, c Caller) {
	var req LeftRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	// A node on record as left is no member, so the raft port would refuse
	// a voter recorded left and cost the cluster its quorum: a control node
	// leaves raft first (`meshctl leave` does), then records itself left.
	if p.raft.IsMember(c.NodeID) {
		writeError(w, codes.Wrap(codes.BadRequest, fmt.Errorf("%s is still in raft; it leaves raft before it records itself left", c.Name)))
		return
	}
	actor := p.relayedActor(c, req.Actor)
	n, ok := p.raft.FSM().Node(c.NodeID)
	if !ok {
		writeError(w, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no record of %s", c.Name)))
		return
	}
	keep := enroll.TokenHash{}
	if c.Role == pki.RoleControl {
		keep = req.Keep // a worker is named by no token as a seed: nothing to keep
	}
	if err := p.Write(r.Context(), &state.SetNodeState{NodeID: c.NodeID, State: state.NodeLeft, At: p.now(), Actor: actor, Keep: keep}); err != nil {
		writeError(w, err)
		return
	}
	p.departed(r.Context(), n)
	apitype.WriteJSON(w, http.StatusOK, p.confirmRevocation(r.Context(), n, p.cfg.revocationAckTimeout(), actor))
}
