package state

import (
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// An ephemeral node (Node.Ephemeral, issue 31) is removed by the cluster
// once gossip has seen it failed or left for the ephemeral window: the
// raft leader removes it as `meshctl remove` does (its certificates
// revoked, the members' acknowledgements asked and recorded), then
// forgets it (ForgetNode): its record goes, so its name and overlay IP
// are free for the next admission, while its revocations stay until the
// certificates expire.

// EphemeralAllowed reports whether a node of role may be ephemeral: a
// worker only (codes.BadRole otherwise). Removing a control node changes
// raft's configuration and may cost the quorum; the cluster does not do
// that on its own on a gossip timer. Admissions check it before they
// record a node ephemeral.
func EphemeralAllowed(role pki.Role) error {
	if role != pki.RoleWorker {
		return codes.Wrap(codes.BadRole, fmt.Errorf("a %s node cannot be ephemeral: only workers are", role))
	}
	return nil
}

// ForgetNode deletes the record of a removed ephemeral node: the record,
// its overlay IP's allocation (when the allocation is this node's) and
// its acknowledgement round. Every revocation of its certificates stays,
// so they are blocked until they expire. A node that is unknown
// (codes.NodeUnknown), not ephemeral or not removed (codes.BadRequest)
// is refused with nothing changed.
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
	case !n.Ephemeral:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("forget node: %s is not ephemeral; only an ephemeral node's record is deleted", n.Name))
	case n.State != NodeRemoved:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("forget node: %s is %s; only a removed node is forgotten", n.Name, n.State))
	}
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
