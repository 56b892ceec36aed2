package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
)

// notifyRevoked is the gossip notification that the revocation list
// changed: workers fetch it at once instead of on their next tick.
const notifyRevoked = "meshd-revoked"

// Leave takes this node out of the cluster for good: its raft membership
// removed (control), its record set to left (which frees its name: the
// next admission of it reuses the record, keeping node id and overlay
// IP), gossip leave (the others withdraw it from their overlay at once),
// then it stops and wipes its state and is an unjoined agent again. The
// CA holder cannot leave, and neither can a voter whose leave would cost
// raft its quorum.
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
	// A copy of the CA keys (the holder's, or a handoff's unfinished one)
	// is never wiped: refuse before the node departs, not after.
	if err := statedir.RefuseCAWipe(a.cfg.StateDir, "leave"); err != nil {
		return err
	}
	if err := a.depart(ctx, rt); err != nil {
		return err
	}
	a.stopRuntime()
	a.setPhase(phaseUnjoined, nil)
	if err := statedir.Wipe(a.cfg.StateDir); err != nil {
		return err
	}
	a.log.Info("left the cluster", "code", codes.EventNodeLeft, "node", rt.facts.Name, "cluster", rt.facts.ClusterName)
	return nil
}

// depart takes rt's node out of its cluster, leaving this meshd running
// it: the CA holder is refused, and so is a voter whose leave would cost
// raft its quorum (codes.QuorumLoss). Raft membership first (a control
// node), then the record (once it says left, the leader no longer answers
// this node), then gossip.
func (a *Agent) depart(ctx context.Context, rt *runtime) error {
	if rt.holdsCA() {
		return codes.Wrap(codes.CAHolderStays, fmt.Errorf("%s holds the CA", rt.facts.Name))
	}
	if rt.ctl != nil {
		if err := rt.ctl.LeaveVoterCheck(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if rt.ctl != nil {
		if err := rt.ctl.LeaveRaft(ctx); err != nil {
			return fmt.Errorf("leave raft: %w", err)
		}
	}
	if err := rt.recordLeft(ctx, operatorOn(ctx, rt.facts.Name)); err != nil {
		return err
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := rt.gossip.Leave(lctx); err != nil {
		a.log.Warn("gossip leave did not complete; the others will see this node fail instead", "err", err)
	}
	lcancel()
	return nil
}

// recordLeft sets this node's record to left: through raft on a control
// node, through a control node's internal API on a worker. actor is the
// operator who asked; the control node records it only as this node's.
func (rt *runtime) recordLeft(ctx context.Context, actor string) error {
	if rt.ctl != nil {
		return rt.ctl.RecordLeft(ctx, actor)
	}
	return rt.client.PostSeeds(ctx, rt.seeds(), control.PathLeft, control.LeftRequest{NodeID: rt.facts.NodeID, Actor: actor}, nil)
}

// Remove takes a dead or unwanted node out of the cluster from a control
// node and shows convergence: who acknowledged the revocation within wait
// (control.Plane.RemoveAndConfirm).
func (a *Agent) Remove(ctx context.Context, name, actor string, wait time.Duration) (*apitype.RemoveResponse, error) {
	ctl, err := a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.RemoveAndConfirm(ctx, name, actor, wait)
}
