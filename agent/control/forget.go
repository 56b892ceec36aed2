package control

import (
	"context"
	"fmt"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// Forget drops the record of the former node (left, removed or failed)
// named name now, audited with actor (issue 52 item 2): its name and
// overlay IP are free for the next admission, and every revocation of its
// certificates stays until they expire. A node that is still a member is
// codes.NodeNotFormer (remove it first); a name no record holds is
// codes.NodeUnknown. A former control node still in raft is dropped from
// it first: the leader drops only a server it has a record of.
func (p *Plane) Forget(ctx context.Context, name, actor string) (*apitype.ForgetResponse, error) {
	if err := p.SyncRead(ctx); err != nil {
		return nil, err
	}
	if n, ok := p.raft.FSM().NodeByName(name); ok {
		return nil, codes.Wrap(codes.NodeNotFormer, fmt.Errorf("%s is %s: only a node that left, was removed or failed its join is forgotten", n.Name, n.State))
	}
	n, ok := p.raft.FSM().FormerNode(name)
	if !ok {
		return nil, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node named %q", name))
	}
	if n.Role == pki.RoleControl {
		if err := p.removeFromRaft(ctx, n.ID, actor); err != nil {
			return nil, err
		}
	}
	if err := p.WriteApplied(ctx, &state.ForgetNode{NodeID: n.ID, At: p.now(), Actor: actor}); err != nil {
		return nil, err
	}
	kept := 0
	for _, r := range p.raft.FSM().Revocations() {
		if r.NodeID == n.ID {
			kept++
		}
	}
	p.log.Info("former node forgotten", "code", codes.EventNodeForgotten, "node", n.Name, "node_id", n.ID, "was", n.State,
		"revocations_kept", kept, "actor", actor)
	return &apitype.ForgetResponse{Name: n.Name, ID: n.ID, State: string(n.State), OverlayIP: n.OverlayIP.String(), Revocations: kept}, nil
}
