package member

import (
	"context"
	"fmt"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// Depart takes rt's node out of its cluster, leaving the runtime
// running: the CA holder is refused, and so is a voter whose leave would
// cost raft its quorum (codes.QuorumLoss). Raft membership first (a
// control node), then the record (once it says left, the leader no longer
// answers this node), then gossip. actor is the operator who asked.
//
// A node its cluster no longer knows (standing.go) has nothing to leave:
// it departs at once, and so does a worker whose request to be recorded
// left is refused as not a member's. The caller then wipes its state.
func (rt *Runtime) Depart(ctx context.Context, actor string) (err error) {
	return rt.DepartKeeping(ctx, actor, enroll.TokenHash{})
}

// DepartKeeping is Depart for `join --force`: keep is the token the new
// join uses, which a control node's departure would otherwise revoke as
// naming a departed seed (control.LeftRequest.Keep).
func (rt *Runtime) DepartKeeping(ctx context.Context, actor string, keep enroll.TokenHash) (err error) {
	if rt.HoldsCA() {
		return codes.Wrap(codes.CAHolderStays, fmt.Errorf("%s holds the CA", rt.facts.Name))
	}
	if err := rt.standing.Err(); err != nil {
		rt.log.Info("leaving: the cluster no longer knows this node; nothing to leave", "code", codes.RemovedByCluster)
		return nil
	}
	// From here the control nodes refuse it because it leaves: no removal.
	rt.standing.Leaving()
	defer func() {
		if err != nil {
			rt.standing.Stay()
		}
	}()
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
	if err := rt.recordLeft(ctx, actor, keep); codes.Of(err) == codes.NotMember && rt.ctl == nil {
		rt.log.Info("leaving: the cluster refuses this node as not a member; nothing to leave", "code", codes.NotMember, "err", err)
		return nil
	} else if err != nil {
		return err
	}
	if rt.gossip == nil { // out of the pool (outofpool.go): the record says it left
		return nil
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := rt.gossip.Leave(lctx); err != nil {
		rt.log.Warn("gossip leave did not complete; the others will see this node fail instead", "err", err)
	}
	lcancel()
	return nil
}

// recordLeft has a control node record this node left (POST
// /v1/self/left; a control node asks another one, since its own
// revocation cuts it off from the members it would ask to acknowledge
// it): every certificate it held is revoked, and the answer says which
// members acknowledged they block it. actor is the operator who asked;
// the control node records it only as this node's.
func (rt *Runtime) recordLeft(ctx context.Context, actor string, keep enroll.TokenHash) error {
	var (
		acks apitype.RemoveResponse
		err  error
	)
	if rt.ctl != nil {
		acks, err = rt.ctl.RecordLeft(ctx, actor, keep)
	} else {
		err = rt.client.PostSeeds(ctx, rt.seeds(), control.PathLeft, control.LeftRequest{NodeID: rt.facts.NodeID, Actor: actor}, &acks)
	}
	if err != nil {
		return err
	}
	rt.log.Info("recorded left; every certificate of this node revoked", "code", codes.EventNodeLeft,
		"acknowledged", len(acks.Acked), "pending", acks.Pending)
	return nil
}
