package apitype

import "time"

// Tunnel is one established Nebula tunnel.
type Tunnel struct {
	OverlayIP string `json:"overlay_ip"`
	Remote    string `json:"remote"`
	Name      string `json:"name"`
	Relayed   bool   `json:"relayed,omitempty"` // through a Nebula relay, not a direct path
}

// TunnelMap answers GET /v0/tunnels on a control node: which node reaches
// which, over which underlay path, from every node's own report.
type TunnelMap struct {
	Edges []TunnelEdge `json:"edges"`
	Nodes []TunnelNode `json:"nodes"` // every active node, with why it has no report
	// Broken are the pairs of active nodes one end (or both) reports it
	// cannot reach the other over the overlay by its own probes; absent
	// when none (and from nodes that do not report it yet).
	Broken []TunnelBreak `json:"broken,omitempty"`
}

// TunnelBreak is a broken pair: A and B (A < B) are both active and not
// down in gossip, and From (A, B or both) report the other end
// unreachable over the overlay.
type TunnelBreak struct {
	A    string   `json:"a"`
	B    string   `json:"b"`
	From []string `json:"from"`
}

// TunnelEdge is a tunnel between nodes A and B (A < B), as seen from one
// or both ends.
type TunnelEdge struct {
	A        string       `json:"a"`
	B        string       `json:"b"`
	SeenFrom []string     `json:"seen_from"` // A, B or both
	Paths    []TunnelPath `json:"paths"`
}

// TunnelPath is the underlay address one end of a tunnel sends to.
type TunnelPath struct {
	From    string `json:"from"`
	Remote  string `json:"remote"`
	Relayed bool   `json:"relayed,omitempty"`
}

// TunnelNode is one active node in the view: its report, or why none.
type TunnelNode struct {
	Name       string    `json:"name"`
	Role       string    `json:"role"`
	Reported   bool      `json:"reported"`
	ReportedAt time.Time `json:"reported_at,omitzero"`
	Tunnels    int       `json:"tunnels"`           // its tunnels in Edges (none to a dead node)
	Problem    string    `json:"problem,omitempty"` // e.g. "no answer: ..."
	// Unreachable are the active members it reports it cannot reach
	// over the overlay (its own probes; Broken has the pairs).
	Unreachable []string `json:"unreachable,omitempty"`
}
