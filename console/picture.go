package console

import (
	"math"

	"github.com/meshd/meshd/agent/apitype"
)

// The picture's canvas, in SVG user units; the page scales it. A node is a
// circle of radius nodeR, smaller when many share the ring (never under
// minNodeR); below labelR the names are left to the tooltips and the table.
const (
	pictureW = 720
	pictureH = 480
	nodeR    = 18
	minNodeR = 3
	labelR   = 10
	margin   = 40 // room for the labels of the nodes at the ring's edge
)

// picture is the Mesh page's SVG: a node a circle on a ring, coloured by
// role and condition, and an edge for each Nebula tunnel the local API
// reports.
type picture struct {
	W, H  int
	Nodes []pictureNode
	Edges []pictureEdge
	// TunnelsOf names the node whose tunnels the edges are: the local API
	// reports the tunnels of the node the console talks to only.
	TunnelsOf string
	// NoTunnels: that node reports no overlay (no edges to draw).
	NoTunnels bool
}

type pictureNode struct {
	nodeRow
	X, Y    int
	LabelY  int // 0: no label (too many nodes to name them all)
	R       int
	BeaconR int // the lighthouse's outer ring
}

type pictureEdge struct {
	X1, Y1, X2, Y2 int
	Title          string
}

// draw lays the nodes out on a ring (sorted by name, so a node keeps its
// place between two loads while the set is the same) and draws the tunnels.
func draw(st *apitype.Status, rows []nodeRow) *picture {
	p := &picture{W: pictureW, H: pictureH}
	cx, cy := pictureW/2, pictureH/2
	ring := float64(min(pictureW, pictureH))/2 - margin
	r := nodeR
	if n := len(rows); n > 1 {
		// Neighbours on the ring are 2·ring·sin(π/n) apart, centre to
		// centre; a node and its lighthouse ring take a third of that.
		r = max(minNodeR, min(nodeR, int(ring*math.Sin(math.Pi/float64(n))/3)))
	}
	at := map[string]int{} // name and overlay IP → index
	for i, n := range rows {
		x, y := cx, cy
		if len(rows) > 1 {
			a := 2*math.Pi*float64(i)/float64(len(rows)) - math.Pi/2
			x, y = cx+int(math.Round(ring*math.Cos(a))), cy+int(math.Round(ring*math.Sin(a)))
		}
		labelY := 0
		if r >= labelR {
			labelY = y + r + 16
		}
		p.Nodes = append(p.Nodes, pictureNode{nodeRow: n, X: x, Y: y, LabelY: labelY, R: r, BeaconR: r + max(2, r/3)})
		at[n.Name] = i
		if n.OverlayIP != "" {
			at[n.OverlayIP] = i
		}
	}
	if st == nil {
		return p
	}
	p.TunnelsOf = st.Node
	self, ok := at[st.Node]
	if st.Overlay == nil || !ok {
		p.NoTunnels = true
		return p
	}
	for _, t := range st.Overlay.Tunnels {
		j, ok := at[t.Name]
		if !ok {
			j, ok = at[t.OverlayIP]
		}
		if !ok || j == self {
			continue
		}
		a, b := p.Nodes[self], p.Nodes[j]
		p.Edges = append(p.Edges, pictureEdge{X1: a.X, Y1: a.Y, X2: b.X, Y2: b.Y,
			Title: st.Node + " ↔ " + b.Name + " via " + t.Remote})
	}
	return p
}
