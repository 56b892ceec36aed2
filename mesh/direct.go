package mesh

import (
	"net/netip"
	"slices"
)

// What agent/pathup needs to move a relayed tunnel onto a direct path
// (Nebula v1.10.3 never does it by itself).

// RelayedPeers lists the overlay addresses of the peers whose established
// tunnel goes through a relay now.
func (m *Mesh) RelayedPeers() []netip.Addr {
	var out []netip.Addr
	for _, t := range m.RelayedTunnels() { // the cached list (tunnel.go); none when stopped
		out = append(out, t.OverlayIP)
	}
	return out
}

// DirectCandidates asks the lighthouses about the peer at ip and returns
// the underlay addresses they hold for it, de-duplicated, the peer's
// static_host_map entries (the address it advertised, often a private one
// Nebula's own handshake has tried already) last. The query has each
// lighthouse tell the peer to punch towards this node (after
// punchy.delay, PunchDelay): what opens the peer's NAT to this node's
// packets.
// Nothing for a lighthouse or a stopped instance.
func (m *Mesh) DirectCandidates(ip netip.Addr) []netip.AddrPort {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped || !ip.IsValid() || ip == m.self {
		return nil
	}
	cm := m.ctrl.QueryLighthouse(ip)
	if cm == nil {
		return nil
	}
	var learned, reported []netip.AddrPort
	for _, e := range *cm {
		if e == nil {
			continue
		}
		learned = append(learned, e.Learned...)
		reported = append(reported, e.Reported...)
	}
	static := m.applied.StaticHosts[ip]
	var out, last []netip.AddrPort
	for _, a := range slices.Concat(learned, reported) {
		switch {
		case !a.IsValid() || slices.Contains(out, a) || slices.Contains(last, a) || m.net.Contains(a.Addr()):
		case slices.Contains(static, a):
			last = append(last, a)
		default:
			out = append(out, a)
		}
	}
	return append(out, last...)
}

// UseDirect points the established tunnel to ip at the underlay address
// addr: Nebula sends to it from now on instead of through a relay, and
// the peer switches too when a packet reaches it that way (its roaming).
// False when there is no established tunnel to ip.
func (m *Mesh) UseDirect(ip netip.Addr, addr netip.AddrPort) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped || !ip.IsValid() || !addr.IsValid() {
		return false
	}
	return m.ctrl.SetRemoteForTunnel(ip, netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())) != nil
}

// RebuildTunnel closes the tunnel to ip on this side only and starts a new
// handshake at once (through a relay if no direct path answers first).
func (m *Mesh) RebuildTunnel(ip netip.Addr) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped || !ip.IsValid() {
		return
	}
	m.ctrl.CloseTunnel(ip, true)
	m.ctrl.CreateTunnel(ip)
}
