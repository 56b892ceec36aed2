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
// role and condition, an edge for each Nebula tunnel the local API
// reports, and a broken edge for each pair one end of which cannot reach
// the other over the overlay (the cluster-wide view's broken pairs).
type picture struct {
	W, H  int
	Nodes []pictureNode
	Edges []pictureEdge
	// TunnelsOf names the node whose tunnels the edges are: the local API
	// reports the tunnels of the node the console talks to only.
	TunnelsOf string
	// NoTunnels: that node reports no overlay (no edges to draw).
	NoTunnels bool
	// Cluster: the edges are every node's tunnels (GET /v0/tunnels), not
	// only those of the node asked; Missing names the nodes with no report.
	Cluster bool
	Missing []apitype.TunnelNode
	// Broken counts the broken pairs drawn (Edges with Broken set).
	Broken int
	// MapProblem: the cluster-wide view was asked for and failed (the
	// edges fell back to the asked node's tunnels).
	MapProblem *problem
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
	OneSided       bool // only one end reported it (drawn dashed)
	// Broken: one end (or both) cannot reach the other over the overlay
	// by its own probes (drawn dashed red), whether or not a tunnel is
	// still reported between them.
	Broken bool
	// Relayed: the tunnel goes through a Nebula relay, not a direct
	// underlay path (drawn dash-dotted).
	Relayed bool
}

// draw lays the nodes out on a ring (sorted by name, so a node keeps its
// place between two loads while the set is the same) and draws the tunnels.
//
// tm, when not nil, is the cluster-wide view (a control node's
// GET /v0/tunnels): every node's tunnels; else the edges are the tunnels of
// the node asked (st).
func draw(st *apitype.Status, rows []nodeRow, tm *apitype.TunnelMap) *picture {
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
	if tm != nil {
		p.Cluster = true
		for _, n := range tm.Nodes {
			if !n.Reported {
				p.Missing = append(p.Missing, n)
			}
		}
		broken := map[[2]string]bool{}
		for _, br := range tm.Broken {
			i, ok1 := at[br.A]
			j, ok2 := at[br.B]
			if !ok1 || !ok2 || i == j {
				continue
			}
			a, b := p.Nodes[i], p.Nodes[j]
			p.Edges = append(p.Edges, pictureEdge{X1: a.X, Y1: a.Y, X2: b.X, Y2: b.Y, Title: breakTitle(br), Broken: true})
			broken[[2]string{br.A, br.B}] = true
			p.Broken++
		}
		for _, e := range tm.Edges {
			i, ok1 := at[e.A]
			j, ok2 := at[e.B]
			if !ok1 || !ok2 || i == j || broken[[2]string{e.A, e.B}] {
				continue // a broken pair is drawn broken, not as the tunnel Nebula still holds
			}
			a, b := p.Nodes[i], p.Nodes[j]
			p.Edges = append(p.Edges, pictureEdge{X1: a.X, Y1: a.Y, X2: b.X, Y2: b.Y,
				Title: edgeTitle(e), OneSided: len(e.SeenFrom) < 2, Relayed: relayedEdge(e)})
		}
		return p
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
		title := st.Node + " ↔ " + b.Name + " via " + t.Remote
		if t.Relayed {
			title = st.Node + " ↔ " + b.Name + " relayed"
			if b.Tunnel != nil && b.Tunnel.Relay != "" {
				title += " via " + b.Tunnel.Relay
			}
		}
		p.Edges = append(p.Edges, pictureEdge{X1: a.X, Y1: a.Y, X2: b.X, Y2: b.Y, Title: title, Relayed: t.Relayed})
	}
	return p
}

// edgeTitle is an edge's tooltip: both ends and the underlay address each
// end sends to, and which end did not report it.
func edgeTitle(e apitype.TunnelEdge) string {
	s := e.A + " ↔ " + e.B
	for i, p := range e.Paths {
		sep := ": "
		if i > 0 {
			sep = ", "
		}
		s += sep + pathText(p)
	}
	if len(e.SeenFrom) == 1 {
		other := e.A
		if e.SeenFrom[0] == e.A {
			other = e.B
		}
		s += " (not reported by " + other + ")"
	}
	return s
}

// relayedEdge: an end reports the tunnel relayed.
func relayedEdge(e apitype.TunnelEdge) bool {
	for _, p := range e.Paths {
		if p.Relayed {
			return true
		}
	}
	return false
}

// Tunnels is how many of the edges are tunnels (the others are broken
// pairs).
func (p *picture) Tunnels() int { return len(p.Edges) - p.Broken }

// breakTitle is a broken pair's tooltip: which end cannot reach which.
func breakTitle(br apitype.TunnelBreak) string {
	s := br.A + " ↮ " + br.B + ": "
	for i, from := range br.From {
		to := br.A
		if from == br.A {
			to = br.B
		}
		if i > 0 {
			s += "; "
		}
		s += from + " cannot reach " + to
	}
	return s + " over the overlay (its own probes; gossip may show both alive)"
}

// pathText is one end's path: "a → 192.0.2.1:4242" or "a → relayed".
func pathText(p apitype.TunnelPath) string {
	if p.Relayed {
		return p.From + " → relayed"
	}
	return p.From + " → " + p.Remote
}
