package mesh

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/slackhq/nebula"

	"github.com/meshd/meshd/codes"
)

// applyDelta is Reload for a config that differs from the applied one in
// the delta's keys only (diffConfig): Nebula patch 5
// (Control.ApplyConfigDelta) applies the changed static_host_map entries,
// lighthouse.hosts, relay.relays and pki.blocklist entries through the code
// a reload runs for those keys, without rendering, parsing and comparing
// the whole config. It keeps Reload's promise: what it applied is read
// back (verifyDelta, Verify's checks for the changed entries), and a
// change that fails is undone by applying the entries as they were, so
// the running overlay is left as it was (codes.OverlayApply). The caller
// holds m.mu; c is the next config as the caller handed it, entries for
// the own address included.
func (m *Mesh) applyDelta(c Config, d delta, id identity) error {
	var inside []string
	for ip, addrs := range d.static {
		for _, a := range addrs {
			if m.net.Contains(a.Addr()) {
				inside = append(inside, ip.String()+"="+a.String())
			}
		}
	}
	if len(inside) > 0 {
		slices.Sort(inside)
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: Nebula would drop static_host_map entries %s: "+
			"an underlay address inside the overlay network %s", strings.Join(inside, ", "), m.net))
	}
	nextLHs := lighthousesWithout(c.Lighthouses, m.self)
	next := withoutSelfRelays(c, m.self)
	next.Lighthouses = nextLHs
	forward := nebulaDelta(d, m.applied, next)
	done := m.bridge.capture()
	err := m.ctrl.ApplyConfigDelta(m.nc, forward)
	logged := done()
	if err == nil {
		err = m.verifyDelta(next, d, id.fingerprint)
	}
	if err != nil {
		return m.rollbackDelta(err, logged, d, next)
	}

	for ip, addrs := range d.hosts {
		if addrs == nil {
			delete(m.applied.StaticHosts, ip)
		} else {
			m.applied.StaticHosts[ip] = addrs
		}
	}
	if d.lighthouses {
		m.applied.Lighthouses = slices.Clone(nextLHs)
	}
	if d.relays {
		m.applied.Relays = next.Relays
	}
	if len(d.block) > 0 || len(d.unblock) > 0 {
		m.applied.Blocklist = slices.Clone(c.Blocklist)
	}
	if d.roaming {
		m.applied.Roaming = slices.Clone(c.Roaming)
	}
	m.yaml = "" // Render(m.applied) when a rollback needs it (appliedText)
	m.id = id   // inspected again when the last inspection expired
	m.learnPeers(d, next)
	m.closeBlockedTunnels(d.block)
	m.log.Debug("overlay updated", "static_host_map", len(d.static), "lighthouses", d.lighthouses, "relays", d.relays,
		"blocked", len(d.block), "unblocked", len(d.unblock))
	if m.tunRetry {
		return m.tunAddrs(id)
	}
	return nil
}

// inspectDelta is Validate and inspect for a config that differs from the
// applied one in d only: the entries d sets and the fingerprints it
// blocks are checked, the rest as without them; the applied
// certificate's inspection holds until it or a CA expires, unless d
// blocks it. Validation errors carry codes.ConfigInvalid.
func (m *Mesh) inspectDelta(c Config, d delta) (identity, error) {
	rest := c
	rest.StaticHosts, rest.Blocklist = nil, nil
	if err := rest.Validate(); err != nil {
		return identity{}, err
	}
	for ip := range d.hosts {
		if addrs, ok := c.StaticHosts[ip]; ok {
			if err := checkStaticHost(ip, addrs); err != nil {
				return identity{}, codes.Wrap(codes.ConfigInvalid, err)
			}
		}
	}
	for _, fp := range d.block {
		if err := checkFingerprint(slices.Index(c.Blocklist, fp), fp); err != nil {
			return identity{}, codes.Wrap(codes.ConfigInvalid, err)
		}
	}
	if !time.Now().Before(m.id.until) {
		return inspect(c, time.Now())
	}
	if slices.Contains(d.block, m.id.fingerprint) {
		return identity{}, fmt.Errorf("certificate %s is in this node's own blocklist", m.id.fingerprint)
	}
	return m.id, nil
}

// nebulaDelta is d for Nebula, from the config from to next (both with
// the own address dropped from their lists).
func nebulaDelta(d delta, from, next Config) nebula.ConfigDelta {
	nd := nebula.ConfigDelta{
		StaticHosts: make(map[netip.Addr][]string, len(d.static)),
		Block:       d.block, Unblock: d.unblock,
	}
	for ip, addrs := range d.static {
		s := make([]string, len(addrs))
		for i, a := range addrs {
			s[i] = a.String()
		}
		nd.StaticHosts[ip] = s
	}
	// A lighthouse lists no lighthouses (Render); elsewhere the list is
	// sent when its addresses changed, not only an underlay address.
	if old, now := lighthouseIPs(from), lighthouseIPs(next); !next.AmLighthouse && !slices.Equal(old, now) {
		nd.Lighthouses, nd.SetLighthouses = now, true
	}
	if d.relays {
		nd.Relays, nd.SetRelays = []netip.Addr{}, true
		if !next.AmRelay { // as relays renders it
			nd.Relays = slices.Compact(slices.SortedFunc(slices.Values(next.Relays), netip.Addr.Compare))
		}
	}
	return nd
}

// verifyDelta is verify for the entries d changed: the certificate Nebula
// runs, and each static_host_map entry d sets, read back where Verify
// reads it back (on a lighthouse every entry, elsewhere a lighthouse's).
// A removed entry cannot be read back (Verify says why), nor the lists.
func (m *Mesh) verifyDelta(next Config, d delta, fingerprint string) error {
	if err := m.verifyCert(fingerprint); err != nil {
		return err
	}
	lighthouses := lighthouseIPs(next)
	var missing []string
	for _, ip := range slices.SortedFunc(maps.Keys(d.static), netip.Addr.Compare) {
		if !next.AmLighthouse && !slices.Contains(lighthouses, ip) {
			continue // reading it back would query the lighthouses (Verify)
		}
		have := m.staticRemotes(ip)
		for _, a := range d.static[ip] {
			if !slices.Contains(have, a) {
				missing = append(missing, ip.String()+"="+a.String())
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("verify overlay: Nebula does not hold static_host_map entries %s", strings.Join(missing, ", "))
	}
	return nil
}

// rollbackDelta applies the entries d changed on the way to next as they
// were (the applied config, not yet updated), and reports the failure
// with what Nebula logged meanwhile.
func (m *Mesh) rollbackDelta(cause error, logged []string, d delta, next Config) error {
	said := ""
	if len(logged) > 0 {
		said = " (Nebula logged: " + strings.Join(logged, "; ") + ")"
	}
	back := delta{static: map[netip.Addr][]netip.AddrPort{}, relays: d.relays, block: d.unblock, unblock: d.block}
	for ip := range d.static {
		back.static[ip] = staticEntry(m.applied.Lighthouses, m.applied.StaticHosts[ip], ip)
	}
	bd := nebulaDelta(back, next, m.applied)
	if err := m.ctrl.ApplyConfigDelta(m.nc, bd); err != nil {
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w%s; restoring the previous entries failed: %v", cause, said, err))
	}
	if err := m.verifyDelta(m.applied, back, m.fp); err != nil {
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w%s; the restored entries do not verify either: %v", cause, said, err))
	}
	m.log.Warn("overlay update rolled back", keyCode, codes.OverlayApply, keyErr, cause)
	return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w%s; the previous entries are running again", cause, said))
}

// learnPeers adds to the known peers (peers.go) the addresses next names
// that they lack, in order, and keeps the tunnel cache unless one of them
// has a tunnel already (which the cached list, made without it, lacks):
// a membership change costs the peers it names, not every peer known.
func (m *Mesh) learnPeers(d delta, next Config) {
	var add []netip.Addr
	for ip, addrs := range d.hosts {
		if addrs != nil {
			add = append(add, ip)
		}
	}
	if d.lighthouses {
		for _, lh := range next.Lighthouses {
			add = append(add, lh.OverlayIP)
		}
	}
	if d.relays {
		add = append(add, next.Relays...)
	}
	if d.roaming {
		add = append(add, next.Roaming...)
	}
	stale := false
	for _, ip := range add {
		i, found := slices.BinarySearchFunc(m.known, ip, netip.Addr.Compare)
		if found || !ip.IsValid() || ip == m.self {
			continue
		}
		m.known = slices.Insert(m.known, i, ip)
		if m.ctrl.GetHostInfoByVpnAddr(ip, false) != nil {
			stale = true
		}
	}
	if stale {
		m.cache.forget()
	}
}

// closeBlockedTunnels is closeBlocked for the fingerprints a delta
// blocks: Nebula patch 5 finds their tunnels, and those relayed through
// them, among the tunnels this node holds (Control.TunnelsWithCerts),
// where closeBlocked looks up every known peer and marshals each one's
// certificate. The caller holds m.mu.
func (m *Mesh) closeBlockedTunnels(fingerprints []string) {
	if len(fingerprints) == 0 {
		return
	}
	blocked, relayed := m.ctrl.TunnelsWithCerts(fingerprints)
	for _, ip := range blocked {
		closed := 0
		for closed < maxTunnelsPerPeer && m.ctrl.CloseTunnel(ip, true) {
			closed++
		}
		if closed > 0 {
			m.log.Info("closed the tunnel of a revoked certificate", keyOverlayIP, ip, "tunnels", closed)
		}
	}
	for _, ip := range relayed {
		m.ctrl.CloseTunnel(ip, true)
		m.ctrl.CreateTunnel(ip)
		m.log.Info("rebuilt a tunnel relayed through a revoked node", keyOverlayIP, ip, "relays", blocked)
	}
}
