package mesh

import (
	"net/netip"
	"slices"

	"github.com/slackhq/nebula"
)

// Nebula's host listings (Control.ListHostmapHosts and
// ListHostmapIndexes; v1.10.3, and v1.12.0 still: control.go:404-409,
// 430-446, hostmap.go:714) copy each tunnel's remote list while they hold the
// host map's read lock, and the copy takes the remote list's write lock.
// A lighthouse answering a query holds a remote list's read lock and then
// takes the host map's read lock. With a writer waiting on the host map
// (the connection manager swapping a primary tunnel) the three wait on
// each other for good, and the node's Nebula stops: packets, lighthouse,
// every Control call (found by e2e.TestCrashAtEveryJoinStep in CI on
// 2026-12-03: `meshctl nodes` on the origin, a lighthouse, hung 16
// minutes). So meshd never lists the host map: it looks up each peer it
// knows (Control.GetHostInfoByVpnAddr, which copies outside the host map's
// lock).

// knownPeers is known with every overlay address c names added: its
// lighthouses, static hosts (every live node), relays and roaming peers. It never
// shrinks, so a node that was removed (gone from the static hosts in the
// reload that blocks it) is still looked up when its tunnels are closed;
// it grows by the nodes the cluster ever had. A set, not a list searched
// per address: a reload of a cluster of thousands stays linear.
func knownPeers(known []netip.Addr, c Config) []netip.Addr {
	set := make(map[netip.Addr]bool, len(known)+len(c.StaticHosts)+len(c.Lighthouses))
	for _, ip := range known {
		set[ip] = true
	}
	for _, lh := range c.Lighthouses {
		set[lh.OverlayIP] = true
	}
	for ip := range c.StaticHosts {
		set[ip] = true
	}
	for _, r := range c.Relays {
		set[r] = true
	}
	for _, r := range c.Roaming {
		set[r] = true
	}
	delete(set, netip.Addr{})
	out := make([]netip.Addr, 0, len(set))
	for ip := range set {
		out = append(out, ip)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// hosts are the established tunnels to the known peers, the primary one
// of each, in address order, each once: a dual-stack peer is known by
// both its addresses (the static host map holds both) and its tunnel is
// found by either. The caller holds m.mu.
func (m *Mesh) hosts() []nebula.ControlHostInfo {
	var out []nebula.ControlHostInfo
	seen := map[uint32]bool{}
	for _, ip := range m.known {
		if h := m.ctrl.GetHostInfoByVpnAddr(ip, false); h != nil && len(h.VpnAddrs) > 0 && !seen[h.LocalIndex] {
			seen[h.LocalIndex] = true
			out = append(out, *h)
		}
	}
	return out
}
