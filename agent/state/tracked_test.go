package state

import (
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestTrackedAppliesOnce: a retried write with the same request id is not
// applied twice; it answers with the first attempt's result.
func TestTrackedAppliesOnce(t *testing.T) {
	f := bootstrapped(t)
	mint, err := Track("req-1", MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker), Actor: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(t, f, mint); err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	before := stateBytes(t, f)
	if err := apply(t, f, mint); err != nil {
		t.Fatalf("retry: %v, want the first attempt's success", err)
	}
	if string(before) != string(stateBytes(t, f)) {
		t.Fatal("the retry changed the state")
	}

	admit := admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2")
	first, _ := Track("req-2", admit)
	if err := apply(t, f, first); err != nil {
		t.Fatalf("admit: %v", err)
	}
	// The same admission under a new id is refused (the node and token are
	// already recorded)...
	again, _ := Track("req-3", admit)
	want := codes.Of(apply(t, f, again))
	if want == "" {
		t.Fatal("a second admission under a new request id was applied")
	}
	// ...and replaying req-3 answers the same failure, applying nothing.
	before = stateBytes(t, f)
	if got := codes.Of(apply(t, f, again)); got != want {
		t.Fatalf("replayed failure code %q, want %q", got, want)
	}
	if string(before) != string(stateBytes(t, f)) {
		t.Fatal("a replayed failure changed the state")
	}
}

func TestTrackedBounded(t *testing.T) {
	f := bootstrapped(t)
	for i := range RequestsKept + 10 {
		c, _ := Track(string(rune('a'+i%26))+string(rune(i)), SetNodeState{NodeID: originID, State: NodeActive, At: t0})
		mustApply(t, f, c)
	}
	if n := len(f.snapshot().Requests); n != RequestsKept {
		t.Fatalf("kept %d request results, want %d", n, RequestsKept)
	}
}
