package control

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// TestMergeBrokenPairs: the view keeps, of each report's unreachable
// members, the active ones not down in gossip (not the reporter itself,
// not a name on no record), and pairs them once with the ends that
// report the break; a node whose own report is missing is still in the
// pair the other end reports; a reporter down in gossip reports nothing.
func TestMergeBrokenPairs(t *testing.T) {
	now := time.Now()
	active := []state.Node{
		{ID: "a", Name: "a", Role: pki.RoleControl}, {ID: "b", Name: "b", Role: pki.RoleControl},
		{ID: "c", Name: "c", Role: pki.RoleControl}, {ID: "w", Name: "w", Role: pki.RoleWorker},
		{ID: "x", Name: "x", Role: pki.RoleWorker},
	}
	reports := []TunnelReport{
		{NodeID: "a", Name: "a", At: now, Unreachable: []string{"b", "x", "ghost", "a", "w"}},
		{NodeID: "c", Name: "c", At: now},
		{NodeID: "w", Name: "w", At: now, Unreachable: []string{"a"}},
		{NodeID: "x", Name: "x", At: now, Unreachable: []string{"c"}}, // x is down: its report is dropped
	}
	gossip := map[string]string{"a": "alive", "b": "alive", "c": "alive", "w": "suspect", "x": "failed"}
	m := mergeTunnels(active, reports, map[string]string{"b": "no answer: timeout"}, gossip)
	if got, want := fmt.Sprint(m.Broken), "[{a b [a]} {a w [a w]}]"; got != want {
		t.Errorf("broken pairs %s, want %s", got, want)
	}
	for _, n := range m.Nodes {
		want := map[string][]string{"a": {"b", "w"}, "w": {"a"}}[n.Name]
		if !slices.Equal(n.Unreachable, want) {
			t.Errorf("%s reports unreachable %v, want %v", n.Name, n.Unreachable, want)
		}
	}
	if got, want := fmt.Sprint(unreachableFrom(m.Broken)), "map[a:[w] b:[a] w:[a]]"; got != want {
		t.Errorf("unreachable from %s, want %s", got, want)
	}
	// A view without broken pairs has none in its JSON (an older reader
	// sees what it always saw).
	if m := mergeTunnels(active, reports[1:2], nil, nil); m.Broken != nil {
		t.Errorf("broken %v, want none", m.Broken)
	}
}

// TestPairHealthInNodeLists: a worker reports the members it cannot
// reach with its tunnels (names on no active record, and itself, are
// dropped) to one control node, and a control node reports its own; a
// node listing on another control node (`meshctl nodes`), and a worker's
// through the internal API, mark each node with the members that cannot
// reach it; the strict list a worker follows carries no marks; once the
// reports are empty again, so are the marks.
func TestPairHealthInNodeLists(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	_, w1 := c.worker(t, origin, "w1")
	ctx := within(t, 20*time.Second)
	waitState(t, c2, "id-w1", state.NodeActive)

	origin.hooks.mu.Lock()
	origin.hooks.unreachable = []string{"c2"}
	origin.hooks.mu.Unlock()
	report := TunnelsRequest{Tunnels: []apitype.Tunnel{}, Unreachable: []string{"origin", "ghost", "w1", "origin"}}
	if err := w1.Call(ctx, c2.addr, PathSelfTunnels, false, report, nil); err != nil {
		t.Fatalf("w1 reports to c2: %v", err)
	}

	marks := func(rows []apitype.Node) string {
		s := ""
		for _, r := range rows {
			if len(r.UnreachableFrom) > 0 {
				s += fmt.Sprintf("%s:%v ", r.Name, r.UnreachableFrom)
			}
		}
		return s
	}
	const want = "c2:[origin] origin:[w1] "
	rows, err := origin.p.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := marks(rows); got != want {
		t.Errorf("nodes on origin: %q, want %q", got, want)
	}
	var recs []NodeRecord
	if err := w1.Call(ctx, c2.addr, PathNodes, false, nil, &recs); err != nil {
		t.Fatal(err)
	}
	var asRows []apitype.Node
	for _, r := range recs {
		asRows = append(asRows, r.Node)
	}
	if got := marks(asRows); got != want {
		t.Errorf("w1's nodes through c2: %q, want %q", got, want)
	}
	recs = nil
	if err := w1.Call(ctx, c2.addr, PathNodes+StrictQuery, false, nil, &recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.UnreachableFrom != nil {
			t.Errorf("the strict list marks %s: %v", r.Name, r.UnreachableFrom)
		}
	}
	if got, want := fmt.Sprint(origin.p.TunnelMap(ctx).Broken), "[{c2 origin [origin]} {origin w1 [w1]}]"; got != want {
		t.Errorf("the tunnel view's broken pairs: %s, want %s", got, want)
	}

	origin.hooks.mu.Lock()
	origin.hooks.unreachable = nil
	origin.hooks.mu.Unlock()
	if err := w1.Call(ctx, c2.addr, PathSelfTunnels, false, TunnelsRequest{Tunnels: []apitype.Tunnel{}}, nil); err != nil {
		t.Fatal(err)
	}
	if rows, err = c2.p.Nodes(ctx); err != nil {
		t.Fatal(err)
	}
	if got := marks(rows); got != "" {
		t.Errorf("nodes on c2 after the reports cleared: %q, want no marks", got)
	}
}
