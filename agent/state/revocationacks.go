package state

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// RevocationAck is what the members answered when a node's removal asked
// them to confirm they block it: who acknowledged the revocation list
// version holding the removal, and who did not within the bound.
type RevocationAck struct {
	NodeID  string    `json:"node_id"` // the removed node
	Version int       `json:"version"` // the revocation list length that holds the removal
	Acked   []string  `json:"acked,omitempty"`
	Pending []string  `json:"pending,omitempty"`
	At      time.Time `json:"at"`
}

// RecordRevocationAcks records the outcome of a removal's acknowledgement
// round for a removed node. A later round (or a newer version) replaces
// the earlier record.
type RecordRevocationAcks struct {
	Ack   RevocationAck `json:"ack"`
	Actor string        `json:"actor,omitempty"`
}

func (RecordRevocationAcks) commandType() cmdType { return typeRecordRevocationAcks }

func (c RecordRevocationAcks) applyTo(s *Snapshot) error {
	a := c.Ack
	n, ok := s.Nodes[a.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", a.NodeID))
	}
	if !n.State.Former() {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s is %s; acknowledgements are for a departure", n.Name, n.State))
	}
	if a.Version <= 0 || a.At.IsZero() {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: acknowledgements need a list version and a time", n.Name))
	}
	if prev, ok := s.RevocationAcks[a.NodeID]; ok && (a.Version < prev.Version || a.At.Before(prev.At)) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: a newer acknowledgement round is on record", n.Name))
	}
	a.Acked, a.Pending = slices.Clone(a.Acked), slices.Clone(a.Pending)
	slices.Sort(a.Acked)
	slices.Sort(a.Pending)
	if s.RevocationAcks == nil {
		s.RevocationAcks = map[string]RevocationAck{}
	}
	s.RevocationAcks[a.NodeID] = a
	detail := fmt.Sprintf("node %s, version %d, %d acknowledged", n.ID, a.Version, len(a.Acked))
	if len(a.Pending) > 0 {
		detail += ", pending: " + strings.Join(a.Pending, ",")
	}
	s.audit(AuditEvent{Code: codes.EventRevocationAcks, At: a.At, Actor: c.Actor, Subject: n.Name, Detail: detail})
	return nil
}

// RevocationAck is the recorded acknowledgement round of a removed node.
func (f *FSM) RevocationAck(nodeID string) (RevocationAck, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a, ok := f.s.RevocationAcks[nodeID]
	a.Acked, a.Pending = slices.Clone(a.Acked), slices.Clone(a.Pending)
	return a, ok
}
