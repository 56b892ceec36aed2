package mesh

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/slackhq/nebula"

	"github.com/meshd/meshd/codes"
)

// Backoff of WaitTunnel's polling.
const (
	waitFirst = 2 * time.Millisecond
	waitMax   = 200 * time.Millisecond
)

// Tunnel is an established Nebula tunnel to a peer.
type Tunnel struct {
	OverlayIP netip.Addr     // the peer's overlay address
	Remote    netip.AddrPort // the underlay address the tunnel uses now
	CertName  string         // name in the peer's certificate
	Relayed   bool           // through a relay: no direct underlay path (Remote is not valid)
	// Relays are the overlay addresses of the relays the peer is reached
	// through when Relayed, in Nebula's order: it sends through the first
	// one it still has a tunnel to.
	Relays []netip.Addr
}

// Tunnels lists the established tunnels (Nebula's main host map, not the
// pending handshakes), sorted by overlay address. A stopped instance has
// none.
//
// The list is computed once per change of the tunnels (Nebula patch 4's
// count, tunnelchanges.go) and of the peers this instance knows; until
// either changes, a call copies the last list instead of looking up every
// known peer (issue 54: the relay and path loops call it four times a
// second).
func (m *Mesh) Tunnels() []Tunnel {
	return m.cachedTunnels(false)
}

// RelayedTunnels are the tunnels of Tunnels that go through a relay: a
// copy of those alone, so a loop that needs only them costs what they
// are, not what every tunnel is.
func (m *Mesh) RelayedTunnels() []Tunnel {
	return m.cachedTunnels(true)
}

// cachedTunnels is Tunnels, or its relayed part, from the cache, made
// again when the tunnels' change count moved.
func (m *Mesh) cachedTunnels(relayedOnly bool) []Tunnel {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return nil
	}
	gen, _ := m.ctrl.TunnelChanges() // read before the lookups: a change during them is seen next time
	m.cache.mu.Lock()
	defer m.cache.mu.Unlock()
	m.cache.looks.Lists++
	if !m.cache.ok || m.cache.gen != gen {
		m.cache.looks.Scans++
		var all, relayed []Tunnel
		for _, h := range m.hosts() {
			all = append(all, tunnelOf(h))
		}
		slices.SortFunc(all, func(a, b Tunnel) int { return a.OverlayIP.Compare(b.OverlayIP) })
		for _, t := range all {
			if t.Relayed {
				relayed = append(relayed, t)
			}
		}
		m.cache.tunnels, m.cache.relayed, m.cache.gen, m.cache.ok = all, relayed, gen, true
	}
	src := m.cache.tunnels
	if relayedOnly {
		src = m.cache.relayed
	}
	out := make([]Tunnel, len(src))
	for i, t := range src {
		t.Relays = slices.Clone(t.Relays)
		out[i] = t
	}
	return out
}

// TunnelTo is the established tunnel to the peer at overlay address ip, as
// Nebula's main host map has it now; false when there is none (no
// handshake yet or only a pending one, a stopped instance, or ip itself).
func (m *Mesh) TunnelTo(ip netip.Addr) (Tunnel, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped || !ip.IsValid() {
		return Tunnel{}, false
	}
	h := m.ctrl.GetHostInfoByVpnAddr(ip, false)
	if h == nil || len(h.VpnAddrs) == 0 {
		return Tunnel{}, false
	}
	return tunnelOf(*h), true
}

// tunnelOf is the Tunnel of a host map entry.
func tunnelOf(h nebula.ControlHostInfo) Tunnel {
	t := Tunnel{OverlayIP: h.VpnAddrs[0], Remote: h.CurrentRemote, Relayed: relayed(h)}
	if t.Relayed {
		t.Relays = slices.Clone(h.CurrentRelaysToMe)
	}
	if h.Cert != nil {
		// No fingerprint: nothing reads one, and Nebula's Fingerprint
		// marshals and hashes the certificate on every call (the relay
		// and path loops list every tunnel four times a second).
		t.CertName = h.Cert.Name()
	}
	return t
}

// relayed reports whether the tunnel of h goes through a relay: no direct
// underlay path.
func relayed(h nebula.ControlHostInfo) bool {
	return !h.CurrentRemote.IsValid() && len(h.CurrentRelaysToMe) > 0
}

// WaitTunnel makes sure a tunnel to ip is being built (starting a
// handshake when none is pending, which queries the lighthouses as
// needed) and waits until it is established, polling with backoff. When
// ctx ends first the error carries codes.OverlayUnreach. The own address
// needs no tunnel and returns at once.
func (m *Mesh) WaitTunnel(ctx context.Context, ip netip.Addr) error {
	if !ip.IsValid() {
		return codes.Wrap(codes.ConfigInvalid, errors.New("wait for tunnel: invalid overlay address"))
	}
	if ip == m.self {
		return nil
	}
	start := time.Now()
	wait := waitFirst
	timer := time.NewTimer(wait) // Go 1.23+ timers: Reset drops a stale tick
	defer timer.Stop()
	for {
		up, err := m.tunnelUp(ip)
		if err != nil {
			return err
		}
		if up {
			m.log.Debug("tunnel established", keyOverlayIP, ip, "after", time.Since(start))
			return nil
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.OverlayUnreach, fmt.Errorf("no tunnel to %s after %s: %w",
				ip, time.Since(start).Round(time.Millisecond), ctx.Err()))
		case <-timer.C:
		}
		wait = min(2*wait, waitMax)
	}
}

// tunnelUp reports whether a tunnel to ip is established, and starts a
// handshake if none is established or pending. A pending handshake is not
// looked up (GetHostInfoByVpnAddr(ip, true)): Nebula copies the pending
// host info without the handshake manager's lock while the handshake sets
// its addresses from the peer's certificate, which panicked on a
// dual-stack peer (index out of range in copyHostInfo: a join out of the
// gossip pool reaches this wait at once, e2e.TestRemovedWhilePartitioned).
// CreateTunnel (StartHandshake) does nothing when one is pending.
func (m *Mesh) tunnelUp(ip netip.Addr) (bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return false, codes.Wrap(codes.OverlayUnreach, fmt.Errorf("no tunnel to %s: the overlay is stopped", ip))
	}
	if m.ctrl.GetHostInfoByVpnAddr(ip, false) != nil {
		return true, nil
	}
	m.ctrl.CreateTunnel(ip)
	return false, nil
}

// maxTunnelsPerPeer bounds closeBlocked's closes of one address: Nebula
// keeps a handful of tunnels to a peer at most (crossed handshakes).
const maxTunnelsPerPeer = 16

// closeBlocked closes, at once, every established tunnel whose peer
// presented a certificate now in blocklist: Nebula refuses such a
// certificate at its next handshake and drops the tunnel on its own
// connection-manager tick, seconds later; a removed node is cut off when
// the reload that blocks it returns. Nothing is sent to the blocked peer.
// A tunnel relayed through a blocked peer is dead with it: it is built
// again at once (through another relay, if any), rather than when Nebula's
// connection manager finds it dead (7 s under fast timers).
//
// A peer may have more than one tunnel: two handshakes that crossed
// leave both in Nebula's host map, one the primary its address names and
// the other reachable by its index only, which still carries what the
// peer sends. Every tunnel of the address of a peer whose primary tunnel
// presents a blocked certificate is closed (Nebula's CloseTunnel closes
// the primary and promotes the next): closing the primary alone let a removed worker
// reach a volunteer relay over its second tunnel for 4 s, until Nebula's
// own check with lan timers (e2e.TestNATRelayLab/lan/
// removed_refused_through_relay, 2026-12-03). The peers looked at are the
// known ones (peers.go): a node removed before this one ever listed it is
// left to Nebula's own certificate check.
// The caller holds m.mu.
func (m *Mesh) closeBlocked(blocklist []string) {
	if len(blocklist) == 0 {
		return
	}
	var blocked []netip.Addr
	hosts := m.hosts()
	for _, h := range hosts {
		if h.Cert == nil {
			continue
		}
		fp, err := h.Cert.Fingerprint()
		if err != nil || !slices.Contains(blocklist, fp) {
			continue
		}
		blocked = append(blocked, h.VpnAddrs[0])
		closed := 0
		for closed < maxTunnelsPerPeer && m.ctrl.CloseTunnel(h.VpnAddrs[0], true) {
			closed++
		}
		if closed > 0 {
			m.log.Info("closed the tunnel of a revoked certificate", keyOverlayIP, h.VpnAddrs[0], "fingerprint", fp, "tunnels", closed)
		}
	}
	for _, h := range hosts {
		if len(h.VpnAddrs) == 0 || h.CurrentRemote.IsValid() || slices.Contains(blocked, h.VpnAddrs[0]) ||
			!slices.ContainsFunc(h.CurrentRelaysToMe, func(r netip.Addr) bool { return slices.Contains(blocked, r) }) {
			continue
		}
		m.ctrl.CloseTunnel(h.VpnAddrs[0], true)
		m.ctrl.CreateTunnel(h.VpnAddrs[0])
		m.log.Info("rebuilt a tunnel relayed through a revoked node", keyOverlayIP, h.VpnAddrs[0], "relays", h.CurrentRelaysToMe)
	}
}
