package desired

import (
	"fmt"

	"github.com/meshd/meshd/pki"
)

// match finds a gossip member's active record by id in O(1). Each call of
// Peers, Unmatched, View, Doubted and Counts builds one (O(records)) and
// asks it per member: mismatch used to scan every record for each member,
// O(N²) a change, 0.87 s at 10,000 members on this box
// (BenchmarkComputeOneChange, issue 54).
type match struct {
	in   Inputs
	find func(id string) (*Record, bool) // the active record with id (the last with it; ids gone in raft left out)
}

func newMatch(in Inputs) match {
	gone := make(map[string]bool, len(in.Gone))
	for _, id := range in.Gone {
		gone[id] = true
	}
	byID := make(map[string]int, len(in.Records))
	for i, r := range in.Records {
		if !gone[r.ID] {
			byID[r.ID] = i
		}
	}
	return match{in: in, find: func(id string) (*Record, bool) {
		i, ok := byID[id]
		if !ok {
			return nil, false
		}
		return &in.Records[i], true
	}}
}

// mismatch is why m matches no active record, or "".
func (mt match) mismatch(m Member) string {
	if !mt.in.RecordsKnown {
		return "no node list yet"
	}
	rec, ok := mt.find(m.ID)
	if !ok {
		return "no active record with this id"
	}
	switch {
	case rec.Name != m.Name:
		return fmt.Sprintf("record %s is named %q", rec.ID, rec.Name)
	case rec.Role == pki.RoleNebula:
		return "a stock Nebula member does not gossip"
	case rec.Role != m.Role:
		return fmt.Sprintf("tag role %q, record says %s", m.Role, rec.Role)
	case rec.Overlay != m.Overlay:
		return fmt.Sprintf("tag overlay %v, record says %v", m.Overlay, rec.Overlay)
	case m.Addr != rec.Overlay && (!rec.LegacyGossip.IsValid() || m.Addr != rec.LegacyGossip):
		return fmt.Sprintf("gossips from %v, not its overlay address %v", m.Addr, rec.Overlay)
	}
	return ""
}

// Matcher answers Counts for the members of one Inputs, each in O(1)
// once built (NewMatcher is O(records)).
type Matcher struct{ mt match }

// NewMatcher is a Matcher for in.
func NewMatcher(in Inputs) Matcher { return Matcher{newMatch(in)} }

// Counts is Counts(in, m) for the Inputs the Matcher was built from.
func (x Matcher) Counts(m Member) bool {
	return m.Name == x.mt.in.SelfName || x.mt.mismatch(m) == ""
}
