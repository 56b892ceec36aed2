package mesh

import (
	"net/netip"
	"time"
)

// Idle tunnels (issue 54 item 3, step 3). A worker holds a tunnel to
// each peer it exchanged a packet with, and Nebula keeps a tunnel up
// until it fails: over days a worker came to hold one to most of the
// cluster. With Config.IdleTimeout, Nebula closes a tunnel that carried
// nothing for that long (tunnels.drop_inactive), and the next packet to
// the peer opens a new one: one handshake, with the packet held until it
// completes (BenchmarkFirstPacket; the peer's underlay address is in the
// static host map, so no lighthouse query). Tunnels to the lighthouses
// and to this node's own relays are kept (Nebula patch 10): they are how
// the node is found and reached.
//
// A probe keeps a tunnel up like any packet, so a prober that probed
// every peer with a tunnel would hold every tunnel for ever. LastTraffic
// tells a tunnel's other traffic from the packets to and from
// Config.GossipPort (pair health's probes, and gossip), so that pair
// health probes only the peers this node talks to.

// IdleTimeout is the Config.IdleTimeout meshd gives workers. Closing a
// tunnel saves its upkeep (a punch each way every
// connection_alive_interval, 5 s, and a connection-manager look) and
// costs one handshake when the peer is next wanted: under a millisecond
// of CPU and one round trip. So it need only outlast the gaps in a live
// exchange: two minutes is longer than the 15-60 s of a metrics scrape
// or an application heartbeat, so a peer with periodic traffic keeps its
// tunnel, and short enough that a worker's tunnels are its last few
// minutes' peers. (Nebula's default is 10 minutes.)
const IdleTimeout = 2 * time.Minute

// IdleTimeoutFast caps Config.IdleTimeout under Config.Fast (meshd's
// `timers: fast`, for tests and the lab): every timer there is shortened,
// and a test of the close then takes seconds, not minutes.
const IdleTimeoutFast = 10 * time.Second

// IdleAfter is how long a tunnel idles before Nebula closes it with c:
// IdleTimeout, at most IdleTimeoutFast under Fast; 0 keeps idle tunnels.
func (c Config) IdleAfter() time.Duration {
	if c.Fast && c.IdleTimeout > IdleTimeoutFast {
		return IdleTimeoutFast
	}
	return c.IdleTimeout
}

// idleTunnels is the tunnels stanza for timeout: nil (Nebula's default,
// keep every tunnel) for 0.
func idleTunnels(timeout time.Duration) *nebulaTunnels {
	if timeout <= 0 {
		return nil
	}
	return &nebulaTunnels{DropInactive: true, InactivityTimeout: timeout.String()}
}

// LastTraffic is when the tunnel to ip last carried a packet that is not
// to or from Config.GossipPort (Nebula patch 10: as its connection
// manager saw at its last look, every connection_alive_interval, or now
// if one came since); the zero time if it carried none; false when there
// is no established tunnel to ip, or the instance is stopped. O(1): one
// host map lookup.
func (m *Mesh) LastTraffic(ip netip.Addr) (time.Time, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped || !ip.IsValid() {
		return time.Time{}, false
	}
	return m.ctrl.LastTraffic(ip)
}
