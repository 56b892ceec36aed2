package control

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

var lan50 = netip.MustParsePrefix("192.168.50.0/24")

func router(id string, routes ...state.Route) state.Node {
	return state.Node{ID: id, Name: id, State: state.NodeActive, OverlayIP: netip.MustParseAddr("10.42.0.2"), Routes: routes}
}

// TestRouteWireRoundTrip: the watch carries a record's routes, their
// approval and carrier, and which its certificate holds; a worker reads
// back what a control node's list shows (who approved aside).
func TestRouteWireRoundTrip(t *testing.T) {
	n := state.Node{Name: "r1", State: state.NodeActive, OverlayIP: netip.MustParseAddr("10.42.0.2"),
		Routes: []state.Route{
			{Prefix: state.ExitPrefix, Approved: true, ApprovedBy: "uid=0@c1"},
			{Prefix: lan50, Approved: true, Carrier: true, ApprovedBy: "uid=0@c1"},
			{Prefix: netip.MustParsePrefix("172.16.0.0/16")},
		},
		NebulaRoutes: []netip.Prefix{state.ExitPrefix, lan50}}
	raw := mustJSON(recordOf(n))
	got, err := WatchedRecord("n-r1", raw)
	if err != nil {
		t.Fatal(err)
	}
	want := NodeRoutes(n)
	for i := range want {
		want[i].ApprovedBy = ""
	}
	if !slices.Equal(got.Routes, want) {
		t.Errorf("routes through the watch %+v, want %+v", got.Routes, want)
	}
	if !slices.Equal(got.NebulaRoutes, []string{"0.0.0.0/0", "192.168.50.0/24"}) {
		t.Errorf("held %v", got.NebulaRoutes)
	}
	if !want[0].Held || !want[1].Held || want[2].Held {
		t.Errorf("held flags %+v", want)
	}
	// A record whose routes change is a changed record.
	m := n
	m.Routes = slices.Clone(n.Routes)
	m.Routes[1].Carrier = false
	if recordOf(n).same(recordOf(m)) {
		t.Error("a record whose carrier changed encodes as the same")
	}
}

// TestRouteRows: rows sorted by prefix then node; approved rows are
// active (the carrier; an exit node alive in gossip) or standing by.
func TestRouteRows(t *testing.T) {
	recs := []apitype.Node{
		{Name: "r2", State: "active", Routes: []apitype.NodeRoute{{Prefix: "192.168.50.0/24", Approved: true}}},
		{Name: "r1", State: "active", Routes: []apitype.NodeRoute{{Prefix: "192.168.50.0/24", Approved: true, Carrier: true},
			{Prefix: "0.0.0.0/0", Exit: true, Approved: true}}},
		{Name: "w9", State: "active", Routes: []apitype.NodeRoute{{Prefix: "10.1.0.0/16"}}},
		{Name: "gone", State: "removed", Routes: []apitype.NodeRoute{{Prefix: "10.2.0.0/16", Approved: true}}},
	}
	rows := RouteRows(recs, map[string]string{"r1": "alive", "r2": "alive"})
	var got []string
	for _, r := range rows {
		got = append(got, r.Prefix+" "+r.Node+" "+r.State+map[bool]string{true: " active"}[r.Active]+map[bool]string{true: " standby"}[r.Standby])
	}
	want := []string{"0.0.0.0/0 r1 approved active", "10.1.0.0/16 w9 requested", "192.168.50.0/24 r1 approved active", "192.168.50.0/24 r2 approved standby"}
	if !slices.Equal(got, want) {
		t.Errorf("rows\n%q\nwant\n%q", got, want)
	}
}

// TestHAPrefixes: only a prefix with a carrier and a standby is watched;
// its standbys come approved first first.
func TestHAPrefixes(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	solo := netip.MustParsePrefix("172.16.0.0/16")
	nodes := []state.Node{
		router("r1", state.Route{Prefix: lan50, Approved: true, Carrier: true, ApprovedAt: t0},
			state.Route{Prefix: solo, Approved: true, Carrier: true, ApprovedAt: t0}),
		router("r3", state.Route{Prefix: lan50, Approved: true, ApprovedAt: t0.Add(2 * time.Second)}),
		router("r2", state.Route{Prefix: lan50, Approved: true, ApprovedAt: t0.Add(time.Second)}),
		router("r4", state.Route{Prefix: lan50}),
		{ID: "r5", Name: "r5", State: state.NodeRemoved, Routes: []state.Route{{Prefix: lan50, Approved: true}}},
	}
	ha := haPrefixes(nodes)
	if len(ha) != 1 || ha[0].prefix != lan50 || ha[0].carrier.ID != "r1" {
		t.Fatalf("ha %+v, want only %s carried by r1", ha, lan50)
	}
	var ids []string
	for _, s := range ha[0].standbys {
		ids = append(ids, s.ID)
	}
	if !slices.Equal(ids, []string{"r2", "r3"}) {
		t.Errorf("standbys %v, want [r2 r3]", ids)
	}
}

// TestWorkerRequestBlocksNobody: through the internal API, as `meshctl
// routes advertise` sends it, a worker that asks for a private range
// (unapproved) refuses no other worker's request inside it; an operator's
// approval judges the overlap, against approved prefixes only. Fails on
// 8b0a8d4: w2's request was refused RouteOverlap.
func TestWorkerRequestBlocksNobody(t *testing.T) {
	c, origin := newCluster(t)
	_, w1 := c.worker(t, origin, "w1")
	_, w2 := c.worker(t, origin, "w2")
	ctx := within(t, 10*time.Second)
	wide, narrow := netip.MustParsePrefix("192.168.0.0/16"), lan50
	if err := w1.Call(ctx, origin.addr, PathSelfRoutes, false, SelfRoutesRequest{Prefixes: []netip.Prefix{wide}}, nil); err != nil {
		t.Fatalf("w1 asks for %s: %v", wide, err)
	}
	if err := w2.Call(ctx, origin.addr, PathSelfRoutes, false, SelfRoutesRequest{Prefixes: []netip.Prefix{narrow}}, nil); err != nil {
		t.Fatalf("w2 asks for %s beside w1's unapproved %s: %v", narrow, wide, err)
	}
	if err := origin.p.ApproveRoute(ctx, apitype.RouteRequest{Node: "w2", Prefix: narrow.String()}, "uid=0@origin"); err != nil {
		t.Fatalf("approve w2's %s: %v", narrow, err)
	}
	err := origin.p.ApproveRoute(ctx, apitype.RouteRequest{Node: "w1", Prefix: wide.String()}, "uid=0@origin")
	if codes.Of(err) != codes.RouteOverlap {
		t.Fatalf("approve w1's %s over w2's approved %s: %v, want %s", wide, narrow, err, codes.RouteOverlap)
	}
}
