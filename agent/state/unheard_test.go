package state

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
)

// TestSetUnheard: one entry sets and clears a batch; the same value again
// changes nothing; a node that is not active, or unknown, is skipped
// while the rest of the batch applies; Updated does not move; Unheard
// lists the active unheard nodes, and a snapshot carries the field.
func TestSetUnheard(t *testing.T) {
	f := bootstrapped(t)
	for i, name := range []string{"w1", "w2", "w3"} {
		seed := byte(i + 1)
		mustApply(t, f, MintToken{Record: tokenRecord(seed, name, pki.RoleWorker)})
		mustApply(t, f, admitCmd(seed, "n-"+name, name, pki.RoleWorker, "10.42.0."+string(rune('5'+i))))
	}
	mustApply(t, f, SetNodeState{NodeID: "n-w3", State: NodeLeft, At: t0.Add(time.Hour)})
	before, _ := f.Node("n-w1")
	at := t0.Add(2 * time.Hour)

	mustApply(t, f, SetUnheard{Changes: []UnheardChange{{NodeID: "n-w1", At: at}, {NodeID: "n-w2", At: at},
		{NodeID: "n-w3", At: at}, {NodeID: "n-nobody", At: at}}, Actor: "node:" + originID})
	w1, _ := f.Node("n-w1")
	if !w1.Unheard.Equal(at) || !w1.Updated.Equal(before.Updated) {
		t.Fatalf("w1: unheard %v, updated %v; want %v and its updated unchanged (%v)", w1.Unheard, w1.Updated, at, before.Updated)
	}
	if w3, _ := f.Node("n-w3"); !w3.Unheard.IsZero() {
		t.Errorf("a left node took the verdict: unheard %v", w3.Unheard)
	}
	if got := f.Unheard(); !slices.Equal(got, []string{"n-w1", "n-w2"}) {
		t.Errorf("Unheard() = %v, want [n-w1 n-w2]", got)
	}
	if n, ok := f.NodeByOverlayIP(netip.MustParseAddr("10.42.0.6")); !ok || n.ID != "n-w2" {
		t.Errorf("NodeByOverlayIP(10.42.0.6) = %s %v, want n-w2", n.ID, ok)
	}

	// The same value again changes nothing (the state's bytes are equal).
	was := stateBytes(t, f)
	mustApply(t, f, SetUnheard{Changes: []UnheardChange{{NodeID: "n-w1", At: at}}})
	if string(stateBytes(t, f)) != string(was) {
		t.Error("the same verdict again changed the state")
	}

	// Snapshot and restore keep it.
	fresh := New()
	if err := fresh.Restore(persist(t, f)); err != nil {
		t.Fatal(err)
	}
	if n, _ := fresh.Node("n-w2"); !n.Unheard.Equal(at) {
		t.Errorf("restored w2: unheard %v, want %v", n.Unheard, at)
	}

	// Heard again: cleared; a node leaving drops out of Unheard().
	mustApply(t, f, SetUnheard{Changes: []UnheardChange{{NodeID: "n-w1"}}})
	mustApply(t, f, SetNodeState{NodeID: "n-w2", State: NodeLeft, At: at})
	if n, _ := f.Node("n-w1"); !n.Unheard.IsZero() {
		t.Errorf("w1 heard again: unheard %v", n.Unheard)
	}
	if got := f.Unheard(); len(got) != 0 {
		t.Errorf("Unheard() = %v, want none", got)
	}
}
