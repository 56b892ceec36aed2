package state

import (
	"bytes"
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

func TestTrackRefuses(t *testing.T) {
	if _, err := Track("", MintToken{}); err == nil {
		t.Fatal("Track with an empty request id succeeded")
	}
	if _, err := Track("req-1", nil); err == nil {
		t.Fatal("Track of a nil command succeeded")
	}
}

// A malformed tracked entry is refused with its code, changes nothing and
// is not remembered.
func TestTrackedRefuses(t *testing.T) {
	mint, err := Encode(MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := Track("req-inner", MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	if err != nil {
		t.Fatal(err)
	}
	nestedBytes, err := Encode(nested)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  Tracked
		want codes.Code
	}{
		{"no-request-id", Tracked{Inner: mint}, codes.BadRequest},
		{"inner-empty", Tracked{ReqID: "req-1"}, codes.Internal},
		{"inner-garbage", Tracked{ReqID: "req-1", Inner: []byte("\x02{")}, codes.Internal},
		{"nested", Tracked{ReqID: "req-1", Inner: nestedBytes}, codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := bootstrapped(t)
			before := stateBytes(t, f)
			if got := codes.Of(apply(t, f, tc.cmd)); got != tc.want {
				t.Fatalf("code %q, want %q", got, tc.want)
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("a refused tracked entry changed the state")
			}
		})
	}
}

// A retried admission whose first attempt found its IP taken answers
// ErrIPTaken again, bare (the enroll server then picks another IP), and
// records no node.
func TestTrackedReplaysIPTaken(t *testing.T) {
	f := admitFixture(t)
	taken, err := Track("req-taken", admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	for attempt := range 2 {
		if err := apply(t, f, taken); !isIPTaken(err) || codes.Of(err) != "" {
			t.Fatalf("attempt %d: %v (code %q), want bare enroll.ErrIPTaken", attempt, err, codes.Of(err))
		}
	}
	if _, ok := f.Node("n-w1"); ok {
		t.Fatal("a refused admission recorded its node")
	}
}
