package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
)

// A node's life in raft: Admit records it joining (a fresh record, or the
// record of a former node of the same name, reused: same node id and
// overlay IP, new keys, every old certificate revoked); RecordCerts
// records its certificates and leaves it joining; ConfirmJoin makes it
// active once the joiner has confirmed its join (gossip, overlay, and for
// a control node its promotion to raft voter). A join that does not
// confirm within the leader's bound is FailJoin'ed: failed, with its
// cause, certificates revoked, token still consumed. SetNodeState then
// moves an active node to left or removed. Left, removed and failed are
// the former states: the name is free again. Every move into one of them
// is a departure (depart.go): every certificate the record held revoked.

// ConfirmJoin moves a joining node whose certificates are recorded to
// active: the joiner confirmed its join. A node already active is a
// no-op; a failed one is codes.JoinUnconfirmed; anything else is refused.
type ConfirmJoin struct {
	NodeID string    `json:"node_id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

// FailJoin moves a node that is still joining to failed, with Cause: the
// raft leader writes it for a join that did not confirm within its bound
// (At comes from the leader's clock; apply reads none). Its certificates
// are revoked as on removal; the token it consumed stays consumed.
type FailJoin struct {
	NodeID string    `json:"node_id"`
	Cause  string    `json:"cause"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

func (ConfirmJoin) commandType() cmdType { return typeConfirmJoin }
func (FailJoin) commandType() cmdType    { return typeFailJoin }

func (c ConfirmJoin) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	switch {
	case !ok:
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("confirm join: no node with id %q", c.NodeID))
	case n.State == NodeActive:
		return nil // confirmed already (a retry)
	case n.State == NodeFailed:
		return codes.Wrap(codes.JoinUnconfirmed, fmt.Errorf("confirm join: node %s was marked failed: %s", n.Name, n.Cause))
	case n.State != NodeJoining:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("confirm join: node %s is %s, not joining", n.Name, n.State))
	case n.TLSFingerprint == "" || n.NebulaFingerprint == "":
		return codes.Wrap(codes.BadRequest, fmt.Errorf("confirm join: node %s has no certificates recorded yet", n.Name))
	}
	n.State, n.Updated, n.Prior = NodeActive, c.At, ""
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: codes.EventNodeActive, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s confirmed its join", n.ID)})
	return nil
}

func (c FailJoin) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	switch {
	case !ok:
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("fail join: no node with id %q", c.NodeID))
	case n.State != NodeJoining:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("fail join: node %s is %s, not joining", n.Name, n.State))
	case c.Cause == "":
		return codes.Wrap(codes.BadRequest, errors.New("fail join: no cause"))
	}
	n = s.depart(n, NodeFailed, c.Cause, c.At, c.Actor) // it got the gossip keys with its join response
	s.audit(AuditEvent{Code: codes.EventJoinFailed, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s: %s", n.ID, c.Cause)})
	return nil
}

// formerByName is the record of a former node (left, removed or failed)
// named name, the most recently updated if there are several.
func (s *Snapshot) formerByName(name string) (Node, bool) {
	var out Node
	found := false
	for _, n := range s.Nodes {
		if n.Name != name || !n.State.Former() {
			continue
		}
		if !found || n.Updated.After(out.Updated) || (n.Updated.Equal(out.Updated) && n.ID < out.ID) {
			out, found = n, true
		}
	}
	return out, found
}

// reuse turns prior, a former node's record, into the joining record n
// (new keys and addresses, prior's id and overlay IP): every certificate
// prior held is revoked, and none of them is the node's any more.
func (s *Snapshot) reuse(prior, n Node, at time.Time) Node {
	s.revoke(prior, at)
	// Created stays this admission's time: the leader's bound on joining
	// counts from it.
	n.ID, n.OverlayIP = prior.ID, prior.OverlayIP
	n.OverlayIP6 = s.overlay6Of(prior.OverlayIP)
	n.TLSFingerprint, n.PrevTLSFingerprint, n.NebulaFingerprint = "", "", ""
	n.TLSCert, n.NebulaCert, n.Retired, n.Cause = nil, nil, nil, ""
	n.TLSExpires, n.NebulaExpires, n.NebulaIssued = time.Time{}, time.Time{}, time.Time{}
	n.Prior = prior.State
	return n
}
