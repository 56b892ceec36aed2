package agent

import (
	"context"

	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
)

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
	if err := rt.Depart(ctx, operatorOn(ctx, rt.Facts().Name)); err != nil {
		return err
	}
	a.stopRuntime()
	a.setPhase(phaseUnjoined, nil)
	if err := statedir.Wipe(a.cfg.StateDir); err != nil {
		return err
	}
	a.log.Info("left the cluster", "code", codes.EventNodeLeft, "node", rt.Facts().Name, "cluster", rt.Facts().ClusterName)
	return nil
}
