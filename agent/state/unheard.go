package state

import (
	"net/netip"
	"slices"
	"time"
)

// SetUnheard is the raft leader's liveness verdict on a batch of members
// (agent/control/verdict.go), one raft entry per tick however many
// changed: each change sets a node's Unheard (At: when the control nodes
// found it silent on every one of them that answered) or clears it (At
// zero: heard again). A node that is not active, or unknown (it left or
// was forgotten meanwhile), is skipped, not refused: the rest of the
// batch still applies. The same value again changes nothing. Updated
// does not move: liveness is not a change of the record's settings.
type SetUnheard struct {
	Changes []UnheardChange `json:"changes"`
	Actor   string          `json:"actor,omitempty"`
}

// UnheardChange is one node's verdict in SetUnheard.
type UnheardChange struct {
	NodeID string    `json:"node_id"`
	At     time.Time `json:"at,omitzero"`
}

func (SetUnheard) commandType() cmdType { return typeSetUnheard }

func (c SetUnheard) applyTo(s *Snapshot) error {
	for _, ch := range c.Changes {
		n, ok := s.Nodes[ch.NodeID]
		if !ok || n.State != NodeActive || n.Unheard.Equal(ch.At) {
			continue
		}
		n.Unheard = ch.At
		s.Nodes[n.ID] = n
	}
	return nil
}

// Unheard lists the active nodes whose Unheard is set, by id, sorted:
// the verdict loop's re-checks each tick cost these, not the node list.
// It is built with the shared records (records.go), once per change.
func (f *FSM) Unheard() []string { return f.records().unheard }

// NodeByOverlayIP returns the node whose overlay IP (v4) is addr, by the
// allocation table: O(1), for the verdict's silent addresses.
func (f *FSM) NodeByOverlayIP(addr netip.Addr) (Node, bool) {
	f.mu.RLock()
	id, ok := f.s.IPAM[addr.Unmap()]
	f.mu.RUnlock()
	if !ok {
		return Node{}, false
	}
	return f.Node(id)
}

// unheardOf is the ids of the active nodes in sorted whose Unheard is
// set, sorted.
func unheardOf(sorted []Node) []string {
	var out []string
	for _, n := range sorted {
		if n.State == NodeActive && !n.Unheard.IsZero() {
			out = append(out, n.ID)
		}
	}
	slices.Sort(out)
	return slices.Clip(out)
}
