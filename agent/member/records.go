package member

import (
	"net/netip"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
)

// records are the other nodes' active records for desired.Compute (the
// cluster's facts: raft on a control node, the node list on a worker).
// A record whose gossip address is not its overlay IP was made by a
// release that gossiped on the underlay: that address is its
// LegacyGossip.
// ok is false on a worker before its first list.
func (nd *node) records() ([]desired.Record, bool) {
	list, ok := nd.cluster.Records()
	out := make([]desired.Record, 0, len(list)) // grown by append, it cost a third of a pass at 10,000 (BenchmarkOverlayInputs)
	for _, n := range list {
		if n.ID == nd.facts.NodeID || !n.Active() {
			continue
		}
		ovl, _ := netip.ParseAddr(n.OverlayIP)
		r := desired.Record{ID: n.ID, Name: n.Name, Role: n.RoleOf(), Overlay: ovl, Relay: n.Relay, Routes: recordRoutes(n.Routes)}
		if n.OverlayIP6 != "" { // absent: invalid (parsing "" allocates its error, once per record and pass)
			r.Overlay6, _ = netip.ParseAddr(n.OverlayIP6)
		}
		if ip, err := netip.ParseAddr(n.Underlay); err == nil && n.NebulaPort > 0 && n.NebulaPort <= 65535 {
			r.Underlay = netip.AddrPortFrom(ip, uint16(n.NebulaPort))
		}
		r.LegacyGossip = control.LegacyGossip(ovl, n.SerfAddr) // admitted by a release that gossiped on the underlay
		out = append(out, r)
	}
	return out, ok
}

// seeds are the control nodes this node asks, in the order it asks them.
func (nd *node) seeds() []string { return nd.cluster.Seeds() }
