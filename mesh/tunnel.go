package mesh

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
)

// Backoff of WaitTunnel's polling.
const (
	waitFirst = 2 * time.Millisecond
	waitMax   = 200 * time.Millisecond
)

// Tunnel is an established Nebula tunnel to a peer.
type Tunnel struct {
	OverlayIP       netip.Addr     // the peer's overlay address
	Remote          netip.AddrPort // the underlay address the tunnel uses now
	CertName        string         // name in the peer's certificate
	CertFingerprint string         // fingerprint of the peer's certificate
	Relayed         bool           // through a relay: no direct underlay path (Remote is not valid)
}

// Tunnels lists the established tunnels (Nebula's main host map, not the
// pending handshakes), sorted by overlay address. A stopped instance has
// none.
func (m *Mesh) Tunnels() []Tunnel {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return nil
	}
	seen := map[uint32]bool{}
	var out []Tunnel
	for _, h := range m.ctrl.ListHostmapHosts(false) {
		// The host map is indexed by overlay address: a peer with several
		// addresses shows up once per address, with the same index.
		if seen[h.LocalIndex] || len(h.VpnAddrs) == 0 {
			continue
		}
		seen[h.LocalIndex] = true
		t := Tunnel{OverlayIP: h.VpnAddrs[0], Remote: h.CurrentRemote,
			Relayed: !h.CurrentRemote.IsValid() && len(h.CurrentRelaysToMe) > 0}
		if h.Cert != nil {
			t.CertName = h.Cert.Name()
			t.CertFingerprint, _ = h.Cert.Fingerprint()
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Tunnel) int { return a.OverlayIP.Compare(b.OverlayIP) })
	return out
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
// handshake if none is established or pending.
func (m *Mesh) tunnelUp(ip netip.Addr) (bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return false, codes.Wrap(codes.OverlayUnreach, fmt.Errorf("no tunnel to %s: the overlay is stopped", ip))
	}
	if m.ctrl.GetHostInfoByVpnAddr(ip, false) != nil {
		return true, nil
	}
	if m.ctrl.GetHostInfoByVpnAddr(ip, true) == nil {
		m.ctrl.CreateTunnel(ip)
	}
	return false, nil
}

// closeBlocked closes, at once, every established tunnel whose peer
// presented a certificate now in blocklist: Nebula refuses such a
// certificate at its next handshake and drops the tunnel on its own
// connection-manager tick, seconds later; a removed node is cut off when
// the reload that blocks it returns. Nothing is sent to the blocked peer.
// The caller holds m.mu.
func (m *Mesh) closeBlocked(blocklist []string) {
	if len(blocklist) == 0 {
		return
	}
	for _, h := range m.ctrl.ListHostmapHosts(false) {
		if h.Cert == nil || len(h.VpnAddrs) == 0 {
			continue
		}
		fp, err := h.Cert.Fingerprint()
		if err != nil || !slices.Contains(blocklist, fp) {
			continue
		}
		if m.ctrl.CloseTunnel(h.VpnAddrs[0], true) {
			m.log.Info("closed the tunnel of a revoked certificate", keyOverlayIP, h.VpnAddrs[0], "fingerprint", fp)
		}
	}
}
