package state

import (
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
)

// ForgetNode deletes the record of a former node (left, removed or
// failed): the record, its overlay IP's allocation (when the allocation
// is this node's) and its acknowledgement round, so its name and overlay
// IP are free for the next admission. The ephemeral reaper forgets the
// nodes it removed; an operator forgets any former node with `meshctl
// forget NAME` (issue 52). Every revocation of its certificates stays,
// and any of them not revoked yet (a record a release before issue 52
// recorded left) is revoked first: a fingerprint never leaves the list
// with its record. A node that is unknown (codes.NodeUnknown) or not
// former (codes.BadRequest: remove it first) is refused with nothing
// changed.
type ForgetNode struct {
	NodeID string    `json:"node_id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

func (ForgetNode) commandType() cmdType { return typeForgetNode }

func (c ForgetNode) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	switch {
	case !ok:
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("forget node: no node with id %q", c.NodeID))
	case !n.State.Former():
		return codes.Wrap(codes.BadRequest, fmt.Errorf("forget node: %s is %s; only a node that left, was removed or failed its join is forgotten", n.Name, n.State))
	}
	s.revoke(n, c.At)
	if s.IPAM[n.OverlayIP] == n.ID {
		delete(s.IPAM, n.OverlayIP)
	}
	delete(s.RevocationAcks, n.ID)
	delete(s.Nodes, n.ID)
	s.settleNodeCarriers(n.Routes, c.At, c.Actor)
	kept := 0
	for _, r := range s.Revocations {
		if r.NodeID == n.ID {
			kept++
		}
	}
	s.audit(AuditEvent{Code: codes.EventNodeForgotten, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s at %s forgotten: its name and overlay IP are free; its %d revocations stay", n.ID, n.OverlayIP, kept)})
	return nil
}
