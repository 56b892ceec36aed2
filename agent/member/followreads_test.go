package member

import (
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
)

// TestFollowReadsOwnRecordAndOtherSections: a worker's watch change wakes
// the follow loop when it carries a section other than the node records
// and revocations, or changed this node's own record; a change of other
// members' records and revocations alone does not (issue 54 item 2).
func TestFollowReadsOwnRecordAndOtherSections(t *testing.T) {
	nd := &node{}
	rec := control.NodeRecord{Node: apitype.Node{ID: "id-w1", Name: "w1", State: "active"}}
	have := true
	own := func() (control.NodeRecord, bool) { return rec, have }
	nodes := []string{control.SectionNodes}
	steps := []struct {
		what     string
		sections []string
		change   func()
		want     bool
	}{
		{"the first change (own record not seen yet)", nodes, nil, true},
		{"another member's record", nodes, nil, false},
		{"a removal and its revocation", []string{control.SectionNodes, control.SectionRevoked}, nil, false},
		{"the gossip keys", []string{control.SectionKeys}, nil, true},
		{"the CA bundle beside records", []string{control.SectionNodes, control.SectionCA}, nil, true},
		{"its own routes", nodes, func() { rec.NebulaRoutes = []string{"10.9.0.0/24"} }, true},
		{"another member's record after that", nodes, nil, false},
		{"its own record gone", nodes, func() { have = false }, true},
		{"still gone", nodes, nil, true}, // nothing held to compare with: the loop looks
		{"back", nodes, func() { have = true }, true},
		{"another member's record after that", nodes, nil, false},
		// No section: a wake-up, a removed node's ask due (fetched.Copies.Follow's
		// onChange(nil)); dropped, the ask waited for the follow loop's tick
		// (agenttest.TestRemovedWorkerSaysSo failed in CI, 2026-12-07).
		{"a wake-up with no change", nil, nil, true},
	}
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		if got := nd.followReads(s.sections, own); got != s.want {
			t.Errorf("%s: followReads = %v, want %v", s.what, got, s.want)
		}
	}
	if !nd.followReads(nodes, nil) {
		t.Error("no own record to look up (a control node's hooks): followReads = false, want true")
	}
}
