package agent

import (
	"testing"

	"github.com/meshd/meshd/agent/apitype"
)

// TestOwnGossipView: a worker's `meshctl nodes` shows its own gossip view
// of each node, not the one of the control node it fetched the records
// from; a node its gossip does not know reads "unknown".
func TestOwnGossipView(t *testing.T) {
	rows := []apitype.Node{
		{Name: "origin", Gossip: "alive"},
		{Name: "w1", Gossip: "alive"},  // the control node still sees it alive
		{Name: "w2", Gossip: "failed"}, // ... and this one failed
		{Name: "w3", Gossip: "alive"},  // this node's gossip never met it
	}
	got := withOwnGossip(rows, map[string]string{"origin": "alive", "w1": "failed", "w2": "alive", "self": "alive"})
	want := map[string]string{"origin": "alive", "w1": "failed", "w2": "alive", "w3": "unknown"}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for _, r := range got {
		if r.Gossip != want[r.Name] {
			t.Errorf("%s: gossip %q, want %q", r.Name, r.Gossip, want[r.Name])
		}
	}
}
