package nebula

import (
	"net/netip"
	"slices"
	"time"

	"github.com/slackhq/nebula/firewall"
)

// meshd patch 10 (PATCHES.md, "Tell a tunnel's own traffic from meshd's
// probes; keep lighthouses and relays"): with tunnels.drop_inactive, a
// tunnel closes after inactivity_timeout without a packet either way. meshd
// probes the peers it has traffic with (pair health, a TCP connection to
// the peer's gossip port every few seconds); counted as traffic, the probes
// would keep every tunnel they touch open for ever. So a tunnel also
// remembers when it last carried a packet that is not to or from one port
// (the quiet port, meshd's gossip port: its probes and gossip), and meshd
// probes only the tunnels that did recently. And a tunnel to a lighthouse
// or to one of this node's own relays (relay.relays) is never dropped for
// inactivity: it is how the node is found and reached.

// markApp notes a firewall-approved packet of hostinfo's tunnel unless it
// is to or from the quiet port. One atomic load per packet; a store only
// on the first packet after the connection manager's last look.
func (f *Interface) markApp(hostinfo *HostInfo, fp *firewall.Packet) {
	if q := f.quietPort.Load(); q != 0 && (uint32(fp.LocalPort) == q || uint32(fp.RemotePort) == q) {
		return
	}
	if !hostinfo.appIn.Load() {
		hostinfo.appIn.Store(true)
	}
}

// keepIdle reports whether hostinfo's tunnel stays up however idle: its
// peer is a lighthouse or one of this node's relays. It reads the
// lighthouse's sets (a map lookup, the short relay list).
func (f *Interface) keepIdle(hostinfo *HostInfo) bool {
	if f.lightHouse == nil {
		return false
	}
	if f.lightHouse.IsAnyLighthouseAddr(hostinfo.vpnAddrs) {
		return true
	}
	relays := f.lightHouse.GetRelaysForMe()
	return slices.ContainsFunc(hostinfo.vpnAddrs, func(a netip.Addr) bool { return slices.Contains(relays, a) })
}

// SetQuietPort sets the overlay port (TCP and UDP, either end) whose
// packets do not count in LastTraffic; 0 counts every packet.
func (c *Control) SetQuietPort(port uint16) {
	c.f.quietPort.Store(uint32(port))
}

// LastTraffic is when the primary tunnel to vpnAddr last carried a packet
// that passed the firewall and is not to or from the quiet port, as the
// connection manager saw it at its last look at the tunnel (every
// timers.connection_alive_interval), or now if one came since; false
// when there is no such tunnel. A tunnel that carried none has the zero
// time. O(1): a host map lookup.
func (c *Control) LastTraffic(vpnAddr netip.Addr) (time.Time, bool) {
	h := c.f.hostMap.QueryVpnAddr(vpnAddr)
	if h == nil {
		return time.Time{}, false
	}
	if h.appIn.Load() {
		return time.Now(), true
	}
	if ns := h.lastApp.Load(); ns != 0 {
		return time.Unix(0, ns), true
	}
	return time.Time{}, true
}
