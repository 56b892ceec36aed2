package console

import (
	"fmt"
	"math"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
)

// TestDrawScales: from one node to a thousand, every node is inside the
// canvas and no two nodes (with their lighthouse rings) overlap; names are
// drawn while they fit and left to the tooltips and the table after.
func TestDrawScales(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 20, 21, 30, 100, 1000} {
		rows := make([]nodeRow, n)
		for i := range rows {
			rows[i] = nodeRow{Node: apitype.Node{Name: fmt.Sprintf("n%04d", i)}, Lighthouse: true}
		}
		p := draw(nil, rows, nil)
		if len(p.Nodes) != n {
			t.Fatalf("%d nodes: drew %d", n, len(p.Nodes))
		}
		for i, a := range p.Nodes {
			if a.X-a.BeaconR < 0 || a.Y-a.BeaconR < 0 || a.X+a.BeaconR > p.W || a.Y+a.BeaconR > p.H || (a.LabelY != 0 && a.LabelY > p.H) {
				t.Errorf("%d nodes: node %d at (%d,%d) r %d label %d is outside %dx%d", n, i, a.X, a.Y, a.BeaconR, a.LabelY, p.W, p.H)
			}
			if n <= 100 {
				for _, b := range p.Nodes[i+1:] {
					if d := math.Hypot(float64(a.X-b.X), float64(a.Y-b.Y)); d < float64(a.BeaconR+b.BeaconR) {
						t.Errorf("%d nodes: %s and %s overlap (%.1f apart, radius %d)", n, a.Name, b.Name, d, a.BeaconR)
					}
				}
			}
		}
		if labelled := p.Nodes[0].LabelY != 0; labelled != (n <= 20) {
			t.Errorf("%d nodes: labelled %v (radius %d)", n, labelled, p.Nodes[0].R)
		}
		for _, a := range p.Nodes {
			if a.LabelY != 0 && a.LabelY <= a.Y+a.R || a.BeaconR <= a.R {
				t.Fatalf("%d nodes: label at %d for a node at %d radius %d, lighthouse ring %d: want the label below, the ring outside", n, a.LabelY, a.Y, a.R, a.BeaconR)
			}
		}
	}
}

// TestDrawPlaces: one node sits in the middle; more start at the top and go
// clockwise in name order, so a node keeps its place between two loads.
func TestDrawPlaces(t *testing.T) {
	one := draw(nil, []nodeRow{{Node: apitype.Node{Name: "a"}}}, nil)
	if a := one.Nodes[0]; a.X != pictureW/2 || a.Y != pictureH/2 {
		t.Errorf("one node at (%d,%d), want the middle", a.X, a.Y)
	}
	rows := []nodeRow{{Node: apitype.Node{Name: "a"}}, {Node: apitype.Node{Name: "b"}}, {Node: apitype.Node{Name: "c"}}, {Node: apitype.Node{Name: "d"}}}
	p := draw(nil, rows, nil)
	ring := pictureH/2 - margin
	want := [][2]int{{360, 240 - ring}, {360 + ring, 240}, {360, 240 + ring}, {360 - ring, 240}}
	for i, a := range p.Nodes {
		if a.X != want[i][0] || a.Y != want[i][1] {
			t.Errorf("node %s at (%d,%d), want (%d,%d)", a.Name, a.X, a.Y, want[i][0], want[i][1])
		}
	}
}

// TestDrawTunnels: a tunnel is matched to its node by name, or by overlay
// IP when it has no name; a tunnel to a node not in the list, or to the
// node itself, draws nothing.
func TestDrawTunnels(t *testing.T) {
	rows := []nodeRow{{Node: apitype.Node{Name: "a", OverlayIP: "10.0.0.1"}}, {Node: apitype.Node{Name: "b", OverlayIP: "10.0.0.2"}},
		{Node: apitype.Node{Name: "c", OverlayIP: "10.0.0.3"}}}
	st := &apitype.Status{Node: "a", Overlay: &apitype.Overlay{Tunnels: []apitype.Tunnel{
		{Name: "b", OverlayIP: "10.9.9.9"}, {OverlayIP: "10.0.0.3"}, {Name: "zz", OverlayIP: "10.0.0.99"}, {Name: "a"}}}}
	p := draw(st, rows, nil)
	if len(p.Edges) != 2 || p.NoTunnels || p.TunnelsOf != "a" {
		t.Fatalf("edges %+v, NoTunnels %v, of %q: want a-b and a-c", p.Edges, p.NoTunnels, p.TunnelsOf)
	}
	b, c := p.Nodes[1], p.Nodes[2]
	if e := p.Edges[0]; e.X2 != b.X || e.Y2 != b.Y {
		t.Errorf("first edge ends at (%d,%d), want b at (%d,%d)", e.X2, e.Y2, b.X, b.Y)
	}
	if e := p.Edges[1]; e.X2 != c.X || e.Y2 != c.Y {
		t.Errorf("second edge ends at (%d,%d), want c at (%d,%d)", e.X2, e.Y2, c.X, c.Y)
	}
}

// TestDrawBrokenPairs: a pair of the cluster-wide view's broken pairs is
// drawn as a broken edge (and not also as the tunnel Nebula may still
// report between them) with a tooltip saying which end cannot reach
// which; a pair with a node not in the list draws nothing.
func TestDrawBrokenPairs(t *testing.T) {
	rows := []nodeRow{{Node: apitype.Node{Name: "a"}}, {Node: apitype.Node{Name: "b"}}, {Node: apitype.Node{Name: "c"}}}
	tm := &apitype.TunnelMap{
		Edges: []apitype.TunnelEdge{
			{A: "a", B: "b", SeenFrom: []string{"a"}, Paths: []apitype.TunnelPath{{From: "a", Remote: "192.0.2.2:4242"}}},
			{A: "a", B: "c", SeenFrom: []string{"a", "c"}},
		},
		Broken: []apitype.TunnelBreak{{A: "a", B: "b", From: []string{"b"}}, {A: "b", B: "zz", From: []string{"b"}}},
	}
	p := draw(nil, rows, tm)
	if len(p.Edges) != 2 || p.Broken != 1 || p.Tunnels() != 1 {
		t.Fatalf("edges %+v (broken %d): want the broken a-b and the tunnel a-c", p.Edges, p.Broken)
	}
	br, tn := p.Edges[0], p.Edges[1]
	a, b := p.Nodes[0], p.Nodes[1]
	if !br.Broken || br.X1 != a.X || br.Y1 != a.Y || br.X2 != b.X || br.Y2 != b.Y ||
		br.Title != "a ↮ b: b cannot reach a over the overlay (its own probes; gossip may show both alive)" {
		t.Errorf("broken edge %+v", br)
	}
	if tn.Broken || tn.X2 != p.Nodes[2].X {
		t.Errorf("tunnel edge %+v, want a-c not broken", tn)
	}
}
