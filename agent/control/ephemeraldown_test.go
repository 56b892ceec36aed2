package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// TestEphemeralDown: how the sweep times ephemeral workers on this
// node's clock, step by step.
func TestEphemeralDown(t *testing.T) {
	t0 := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	eph := func(name string, st state.NodeState) state.Node {
		return state.Node{ID: "id-" + name, Name: name, Role: pki.RoleWorker, State: st, Ephemeral: true}
	}
	var e ephemeralDown
	seen := map[string]time.Time{}
	lastSeen := func(name string) (time.Time, bool) { at, ok := seen[name]; return at, ok }
	down := func(name string, now time.Time) time.Duration {
		d, ok := e.down("id-"+name, now)
		if !ok {
			return -1
		}
		return d
	}
	nodes := []state.Node{eph("a", state.NodeActive), eph("b", state.NodeActive),
		{ID: "id-c", Name: "c", Role: pki.RoleControl, State: state.NodeActive, Ephemeral: true},
		{ID: "id-p", Name: "p", Role: pki.RoleWorker, State: state.NodeActive}, eph("j", state.NodeJoining)}

	// Gossip knows nothing yet (only this node in its view, no times):
	// nothing is decided.
	e.observe(nodes, map[string]string{"self": "alive"}, lastSeen, "self", t0)
	if d := down("a", t0.Add(time.Hour)); d != -1 {
		t.Fatalf("a down %s with gossip knowing nothing", d)
	}
	// Absent from a view that holds another member: down from now. A
	// gossip time from before this node first saw the record (the name's
	// previous holder) is not used.
	seen["b"] = t0.Add(-time.Hour)
	e.observe(nodes, map[string]string{"self": "alive", "x": "alive"}, lastSeen, "self", t0.Add(time.Second))
	if d := down("a", t0.Add(3*time.Second)); d != 2*time.Second {
		t.Fatalf("a down %s, want 2s (absent since the second observation)", d)
	}
	if d := down("b", t0.Add(3*time.Second)); d != 2*time.Second {
		t.Fatalf("b down %s, want 2s: not from a gossip time before the record was first seen", d)
	}
	for _, n := range []string{"c", "p", "j"} {
		if d := down(n, t0.Add(time.Hour)); d != -1 {
			t.Fatalf("%s (control, not ephemeral or joining) timed: down %s", n, d)
		}
	}
	// a is alive again (a restart): its time is gone, and starts again
	// when it next fails; its gossip time counts once after the record
	// was first seen.
	e.observe(nodes, map[string]string{"self": "alive", "a": "alive", "b": "suspect"}, lastSeen, "self", t0.Add(4*time.Second))
	if d := down("a", t0.Add(5*time.Second)); d != -1 {
		t.Fatalf("a down %s after it came back", d)
	}
	if d := down("b", t0.Add(5*time.Second)); d != 4*time.Second {
		t.Fatalf("b down %s while suspect, want 4s: gossip's bad news awaiting this node's probe decides nothing", d)
	}
	seen["a"] = t0.Add(5 * time.Second)
	e.observe(nodes, map[string]string{"self": "alive", "a": "failed", "b": "alive"}, lastSeen, "self", t0.Add(7*time.Second))
	if d := down("a", t0.Add(8*time.Second)); d != 3*time.Second {
		t.Fatalf("a down %s, want 3s (since gossip saw it fail)", d)
	}
	// Left on record: down whatever gossip shows, from now (b's gossip
	// time is from before it was last seen up). Removed: timed as
	// removed. A record gone is forgotten here.
	nodes[0], nodes[1] = eph("a", state.NodeRemoved), eph("b", state.NodeLeft)
	e.observe(nodes, map[string]string{"self": "alive", "b": "alive"}, lastSeen, "self", t0.Add(10*time.Second))
	if d := down("b", t0.Add(12*time.Second)); d != 2*time.Second {
		t.Fatalf("b (left) down %s, want 2s", d)
	}
	if d := e.removedFor("id-a", t0.Add(12*time.Second)); d != 2*time.Second {
		t.Fatalf("a removed for %s, want 2s", d)
	}
	e.observe(nil, map[string]string{"self": "alive"}, lastSeen, "self", t0.Add(13*time.Second))
	if len(e.seen)+len(e.since)+len(e.removed) != 0 {
		t.Fatalf("records gone, still held: %v %v %v", e.seen, e.since, e.removed)
	}
}

// TestReapTick: a quarter of the window, at most 5 s.
func TestReapTick(t *testing.T) {
	for _, tc := range []struct{ window, want time.Duration }{
		{MinEphemeralAfter, 2500 * time.Millisecond},
		{20 * time.Second, 5 * time.Second},
		{DefaultEphemeralAfter, 5 * time.Second},
		{MaxEphemeralAfter, 5 * time.Second},
	} {
		if got := ReapTick(tc.window); got != tc.want {
			t.Errorf("ReapTick(%s) = %s, want %s", tc.window, got, tc.want)
		}
	}
}
