package state

import (
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
)

// SetRelay records whether a node offers itself as a Nebula relay
// (`relay: true` in its meshd.yaml): the node sends it itself, over its
// own mTLS leaf, when it starts with a setting its record does not show
// (control.PathSelfRelay). Only an active or joining node's record
// changes; the same value again changes nothing (not even Updated), so a
// retried report is harmless.
type SetRelay struct {
	NodeID string    `json:"node_id"`
	Relay  bool      `json:"relay"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

func (SetRelay) commandType() cmdType { return typeSetRelay }

func (c SetRelay) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", c.NodeID))
	}
	if n.State != NodeActive && n.State != NodeJoining {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s is %s; only a member's relay setting is recorded", n.Name, n.State))
	}
	if n.Relay == c.Relay {
		return nil
	}
	n.Relay, n.Updated = c.Relay, c.At
	s.Nodes[n.ID] = n
	return nil
}
