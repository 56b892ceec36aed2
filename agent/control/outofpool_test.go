package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestOutOfPoolView: a worker gossip does not list (out of the pool) is
// judged by its record: alive while heard, failed once the control nodes
// recorded it unheard, with LastSeen the verdict's time; a worker gossip
// lists keeps gossip's word whatever its record says (a mixed cluster);
// a departed worker gossip does not list is "left" (unless an active
// record of its name has the word); a control node gossip does not list
// gets no word, nor a worker gossip's raw list holds but its view left out (gossiped
// from another node's address: not out of the pool).
func TestOutOfPoolView(t *testing.T) {
	at := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	nodes := []state.Node{
		{ID: "c1", Name: "c1", Role: pki.RoleControl, State: state.NodeActive},
		{ID: "w1", Name: "w1", Role: pki.RoleWorker, State: state.NodeActive},
		{ID: "w2", Name: "w2", Role: pki.RoleWorker, State: state.NodeActive, Unheard: at},
		{ID: "w3", Name: "w3", Role: pki.RoleWorker, State: state.NodeActive, Unheard: at},
		{ID: "w4", Name: "w4", Role: pki.RoleWorker, State: state.NodeRemoved},
		{ID: "c2", Name: "c2", Role: pki.RoleControl, State: state.NodeActive},
		{ID: "w1-old", Name: "w1", Role: pki.RoleWorker, State: state.NodeLeft},
	}
	gossip := map[string]string{"c1": "alive", "w3": "alive"}
	got := outOfPool(nodes, gossip, map[string]bool{"c1": true, "w3": true})
	if len(gossip) != 2 {
		t.Errorf("gossip's view changed: %v", gossip)
	}
	want := map[string]string{"c1": "alive", "w1": "alive", "w2": "failed", "w3": "alive", "w4": "left"}
	if len(got) != len(want) {
		t.Errorf("view %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (view %v)", k, got[k], v, got)
		}
	}
	if v := outOfPool(nodes, map[string]string{}, map[string]bool{"w1": true}); v["w1"] != "" || v["w2"] != "failed" {
		t.Errorf("w1 in gossip's list but not matched to its record: %v, want no word on w1 (w2 by its record)", v)
	}
	if v := outOfPool(nodes, nil, nil); v != nil {
		t.Errorf("no gossip view: %v, want none", v)
	}
	if v := outOfPool(nodes, map[string]string{}, nil); v["w1"] != "alive" {
		t.Errorf("an empty gossip view: %v, want w1 alive by its record", v)
	}
}

// TestOutOfPoolRows: on a control node over real raft, `meshctl nodes`'
// rows of two workers absent from gossip follow their records: alive,
// then failed with the verdict's time as last seen once recorded unheard,
// alive again once heard; a worker gossip shows failed stays failed
// though its record is heard.
func TestOutOfPoolRows(t *testing.T) {
	c, origin := newCluster(t)
	for _, name := range []string{"w1", "w2"} {
		id, keys, _ := c.identity(t, name, pki.RoleWorker)
		c.admitLeaf(t, origin, name, pki.RoleWorker, keys, enroll.Ports{}, id)
	}
	origin.hooks.mu.Lock()
	origin.hooks.gossip = map[string]string{"c1": "alive", "w2": "failed"}
	origin.hooks.mu.Unlock()
	row := func(name string) (string, time.Time) {
		for _, r := range origin.p.nodeRows() {
			if r.Name == name {
				return r.Gossip, r.LastSeen
			}
		}
		t.Fatalf("no row for %s", name)
		return "", time.Time{}
	}
	if st, _ := row("w1"); st != "alive" {
		t.Errorf("w1 out of the pool, heard: %q, want alive", st)
	}
	if st, _ := row("w2"); st != "failed" {
		t.Errorf("w2 in the pool, gossip's failed: %q, want failed", st)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := origin.p.raft.Apply(within(t, 5*time.Second), state.SetUnheard{Changes: []state.UnheardChange{{NodeID: "id-w1", At: at}}}); err != nil {
		t.Fatal(err)
	}
	if st, seen := row("w1"); st != "failed" || !seen.Equal(at) {
		t.Errorf("w1 unheard: %q last seen %v, want failed since %v", st, seen, at)
	}
	if err := origin.p.raft.Apply(within(t, 5*time.Second), state.SetUnheard{Changes: []state.UnheardChange{{NodeID: "id-w1"}}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := row("w1"); st != "alive" {
		t.Errorf("w1 heard again: %q, want alive", st)
	}
}

// TestPoolMembers: a removal waits for the acknowledgements of the
// members gossip lists, whatever it says of them; a worker out of the
// pool is not waited for; without a gossip view, every member is.
func TestPoolMembers(t *testing.T) {
	expect := map[string]state.Node{"c1": {}, "w1": {}, "w2": {}}
	got := poolMembers(expect, map[string]string{"c1": "alive", "w2": "failed", "gone": "alive"})
	if len(got) != 2 || !got["c1"] || !got["w2"] {
		t.Errorf("waited for %v, want c1 and w2", got)
	}
	if got := poolMembers(expect, nil); len(got) != 3 {
		t.Errorf("no gossip view: waited for %v, want all three", got)
	}
}

// TestOutOfPoolLastSeen: a departed worker gossip has no sight of was
// last seen at its departure (its record's Updated); an active record of
// the same name (reused) has the last word; an active worker out of the
// pool that gossip saw before it left the pool is judged by its verdict,
// not by gossip's stale sight.
func TestOutOfPoolLastSeen(t *testing.T) {
	left := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	stale := left.Add(-time.Hour)
	p := &Plane{hooks: Hooks{LastSeen: func(name string) (time.Time, bool) { return stale, name == "w3" }}}
	seen := p.lastSeenIn([]state.Node{
		{ID: "w1", Name: "w1", Role: pki.RoleWorker, State: state.NodeLeft, Updated: left},
		{ID: "w2-old", Name: "w2", Role: pki.RoleWorker, State: state.NodeRemoved, Updated: left},
		{ID: "w2", Name: "w2", Role: pki.RoleWorker, State: state.NodeActive},
		{ID: "w3", Name: "w3", Role: pki.RoleWorker, State: state.NodeActive, OutOfPool: true, Unheard: left},
	})
	if at, ok := seen("w1"); !ok || !at.Equal(left) {
		t.Errorf("w1 left: last seen %v %v, want its departure %v", at, ok, left)
	}
	if at, ok := seen("w2"); ok {
		t.Errorf("w2 active again under its name: last seen %v, want none", at)
	}
	if at, ok := seen("w3"); !ok || !at.Equal(left) {
		t.Errorf("w3 out of the pool, unheard: last seen %v %v, want the verdict's %v over gossip's %v", at, ok, left, stale)
	}
}
