package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// Internal routes for leaving and removing.
const (
	internalRaftRemovePath  = "/v1/raft/remove" // control: the leader drops a server from raft
	internalLeftPath        = "/v1/self/left"   // any member: record the caller as left
	internalRevocationsPath = "/v1/revocations" // any member: what every Nebula must block
)

// notifyRevoked is the gossip notification that the revocation list
// changed: workers fetch it at once instead of on their next tick.
const notifyRevoked = "meshd-revoked"

type nodeRef struct {
	NodeID string `json:"node_id"`
}

// Leave takes this node out of the cluster for good: gossip leave (the
// others withdraw it from their overlay at once), its record set to left,
// its raft membership removed (control), then it stops and wipes its state
// and is an unjoined agent again. The CA holder cannot leave, and neither
// can the last raft voter.
func (a *Agent) Leave(ctx context.Context) error {
	done, err := a.beginOp()
	if err != nil {
		return err
	}
	defer done()
	rt, err := a.running()
	if err != nil {
		return err
	}
	if rt.facts.CAHolder {
		return codes.Wrap(codes.CAHolderStays, fmt.Errorf("%s holds the CA", rt.facts.Name))
	}
	if rt.raft != nil && rt.isVoter() && rt.raft.Voters() <= 1 {
		return codes.Wrap(codes.QuorumLoss, errors.New("this is the last raft voter"))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// Recorded first, while this node is still a member whose writes the
	// leader accepts; then gossip, then raft membership.
	if err := rt.recordLeft(ctx); err != nil {
		return err
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := rt.gossip.Leave(lctx); err != nil {
		a.log.Warn("gossip leave did not complete; the others will see this node fail instead", "err", err)
	}
	lcancel()
	if rt.raft != nil {
		if err := rt.raft.HandOff(); err != nil {
			a.log.Warn("leadership transfer before leaving failed", "err", err)
		}
		if err := rt.removeFromRaft(ctx, rt.facts.NodeID); err != nil {
			return fmt.Errorf("leave raft: %w", err)
		}
	}
	a.stopRuntime()
	a.setPhase(phaseUnjoined, nil)
	if err := wipeState(a.cfg.StateDir); err != nil {
		return err
	}
	a.log.Info("left the cluster", "code", codes.EventNodeLeft, "node", rt.facts.Name, "cluster", rt.facts.ClusterName)
	return nil
}

// recordLeft sets this node's record to left: through raft on a control
// node, through a control node's internal API on a worker.
func (rt *runtime) recordLeft(ctx context.Context) error {
	if rt.raft != nil {
		return rt.write(ctx, &state.SetNodeState{NodeID: rt.facts.NodeID, State: state.NodeLeft, At: rt.now(), Actor: rt.facts.NodeID})
	}
	var lastErr error = errors.New("no control node known")
	for _, seed := range rt.facts.Seeds {
		if lastErr = rt.callControl(ctx, seed, internalLeftPath, false, nodeRef{NodeID: rt.facts.NodeID}, nil); lastErr == nil {
			return nil
		}
		if !errors.Is(lastErr, errUnreachable) {
			return lastErr
		}
	}
	return codes.Wrap(codes.SeedsUnreachable, lastErr)
}

// handleLeft records the calling member as left.
func (rt *runtime) handleLeft(w http.ResponseWriter, r *http.Request) {
	caller, err := requirePeer(r, pki.RoleWorker, pki.RoleControl)
	if err != nil {
		writeInternalError(w, err)
		return
	}
	if err := rt.write(r.Context(), &state.SetNodeState{NodeID: caller, State: state.NodeLeft, At: rt.now(), Actor: caller}); err != nil {
		writeInternalError(w, err)
		return
	}
	rt.poke()
	writeJSON(w, http.StatusOK, struct{}{})
}

// Remove takes a dead or unwanted node out of the cluster from a control
// node: out of raft (control), its record set to removed, which revokes its
// certificates so every Nebula blocks them, and out of gossip.
func (a *Agent) Remove(ctx context.Context, name, actor string) error {
	rt, err := a.running()
	if err != nil {
		return err
	}
	if rt.raft == nil {
		return codes.Wrap(codes.NotControl, fmt.Errorf("%s is a %s node", rt.facts.Name, rt.facts.Role))
	}
	if err := rt.syncRead(ctx); err != nil {
		return err
	}
	n, ok := rt.raft.FSM().NodeByName(name)
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node named %q", name))
	}
	if n.ID == rt.facts.NodeID {
		return codes.Wrap(codes.BadRequest, errors.New("a node does not remove itself; run `meshctl leave` on it"))
	}
	if c, ok := rt.raft.FSM().Cluster(); ok && c.CAHolder == n.ID {
		return codes.Wrap(codes.CAHolderStays, fmt.Errorf("%s holds the CA", n.Name))
	}
	if n.Role == pki.RoleControl {
		if err := rt.removeFromRaft(ctx, n.ID); err != nil {
			return err
		}
	}
	if err := rt.write(ctx, &state.SetNodeState{NodeID: n.ID, State: state.NodeRemoved, At: rt.now(), Actor: actor}); err != nil {
		return err
	}
	rt.poke()
	if err := rt.gossip.Notify(notifyRevoked); err != nil {
		a.log.Warn("could not tell the cluster about the revocation; workers pick it up on their next tick", "err", err)
	}
	// serf waits for the leave broadcast (up to 5 s when the node is alive
	// and refutes it); the removal does not need to.
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := rt.gossip.ForceLeave(n.Name); err != nil {
			a.log.Warn("gossip force-leave failed", "node", n.Name, "err", err)
		}
	}()
	a.log.Info("node removed and its certificates revoked", "code", codes.EventNodeRemoved, "node", n.Name, "actor", actor)
	return nil
}

// removeFromRaft has the leader drop id from raft membership.
func (rt *runtime) removeFromRaft(ctx context.Context, id string) error {
	if rt.raft.IsLeader() {
		return rt.raftRemove(id)
	}
	addr, err := rt.leaderControlAddr()
	if err != nil {
		return err
	}
	return rt.callControl(ctx, addr, internalRaftRemovePath, true, nodeRef{NodeID: id}, nil)
}

func (rt *runtime) raftRemove(id string) error {
	return rt.raft.RemoveServer(id, 10*time.Second)
}

// handleRaftRemove is the leader's side of removeFromRaft.
func (rt *runtime) handleRaftRemove(w http.ResponseWriter, r *http.Request) {
	var req nodeRef
	rt.leaderOnly(w, r, &req, func() error { return rt.raftRemove(req.NodeID) })
}
