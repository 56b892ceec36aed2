package mesh

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// identity is what Start and Reload learn from a Config's certificate.
type identity struct {
	fingerprint string
	expires     time.Time
	ip          netip.Addr   // first network of the certificate: the overlay address
	network     netip.Prefix // that network, masked
	// networks are all of the certificate's networks, IPv4 first: a
	// dual-stack (v2) certificate's IPv6 address with its prefix second.
	networks []netip.Prefix
	// until is when the first of the certificate and the CAs expires:
	// the inspection holds for the same PEM until then (inspectDelta).
	until time.Time
}

// inspect checks what Nebula would accept without complaint but cannot
// work: the certificate must be a current host certificate that chains to
// one of the CAs, is not in the config's own blocklist, and pairs with the
// key. Nebula loads a certificate from a foreign CA, or one whose key does
// not match, and only fails handshakes later.
func inspect(c Config, now time.Time) (identity, error) {
	fp, expires, err := pki.NebulaCertInfo(c.Cert)
	if err != nil {
		return identity{}, err
	}
	crt, _, err := cert.UnmarshalCertificateFromPEM(c.Cert)
	if err != nil {
		return identity{}, fmt.Errorf("parse Nebula certificate: %w", err)
	}
	if crt.IsCA() {
		return identity{}, fmt.Errorf("certificate %s is a CA, not a host certificate", fp)
	}
	nets := crt.Networks()
	if len(nets) == 0 {
		return identity{}, fmt.Errorf("certificate %s has no overlay network", fp)
	}
	pool, err := cert.NewCAPoolFromPEM(c.CACert)
	if err != nil && !(errors.Is(err, cert.ErrExpired) && pool != nil) {
		return identity{}, fmt.Errorf("Nebula CA certificates: %w", err)
	}
	if _, err := pool.VerifyCertificate(now, crt); err != nil {
		return identity{}, fmt.Errorf("certificate %s (%s) does not verify against the CA: %w", fp, crt.Name(), err)
	}
	if slices.Contains(c.Blocklist, fp) {
		return identity{}, fmt.Errorf("certificate %s is in this node's own blocklist", fp)
	}
	key, _, curve, err := cert.UnmarshalPrivateKeyFromPEM(c.Key)
	if err != nil {
		return identity{}, fmt.Errorf("parse Nebula private key: %w", err)
	}
	if err := crt.VerifyPrivateKey(curve, key); err != nil {
		return identity{}, fmt.Errorf("the private key does not match certificate %s: %w", fp, err)
	}
	until := crt.NotAfter()
	for _, ca := range pool.CAs {
		if na := ca.Certificate.NotAfter(); na.Before(until) {
			until = na
		}
	}
	return identity{fingerprint: fp, expires: expires, ip: nets[0].Addr(), network: nets[0].Masked(), networks: nets, until: until}, nil
}

// Reload applies c to the running instance.
//
// A change Nebula cannot apply live (ListenHost, ListenPort, TunDev,
// AmLighthouse, Userspace, Fast, or a certificate for another overlay
// address) is refused with codes.RestartNeeded and nothing is applied.
// A config that differs only in what a membership change touches (the
// static hosts, lighthouses, relays, blocklist and roaming peers) is
// applied as a delta: only the changed entries, through Nebula patch 5,
// read back and undone on a mismatch (applyDelta). Otherwise the full
// rendered config goes to ReloadConfigString, which reports only YAML
// errors, and Verify reads the result back. If it does not match, the
// previous config is reloaded. Either way the error then carries
// codes.OverlayApply: a config that cannot be applied leaves the running
// overlay as it was. Invalid input gets codes.ConfigInvalid, a certificate
// that fails inspection codes.OverlayApply, both before anything changes.
func (m *Mesh) Reload(c Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, deltaOnly := diffConfig(m.applied, c, m.self)
	deltaOnly = deltaOnly && !m.testOnlyFullReload
	var id identity
	var err error
	if deltaOnly {
		// The certificate, CA bundle and key are the applied ones, and
		// every static host and fingerprint but the delta's passed
		// before: only what changed is checked again.
		id, err = m.inspectDelta(c, d)
	} else if err = c.Validate(); err == nil {
		id, err = inspect(c, time.Now())
	}
	if codes.Of(err) != "" {
		return err
	}
	if err != nil {
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w", err))
	}
	if m.stopped {
		return codes.Wrap(codes.OverlayApply, errors.New("reload overlay: the overlay is stopped"))
	}
	fields := restartFields(m.applied, c)
	if id.ip != m.self {
		fields = append(fields, fmt.Sprintf("Cert (overlay address %s, running %s)", id.ip, m.self))
	}
	if len(fields) > 0 {
		return codes.Wrap(codes.RestartNeeded, fmt.Errorf("reload overlay: Nebula cannot change %s while it runs", strings.Join(fields, ", ")))
	}
	if deltaOnly && !d.empty() {
		return m.applyDelta(c, d, id)
	}
	eff := c.withoutSelf(m.self)
	if deltaOnly && d.empty() {
		return m.unchanged(eff, id)
	}
	if dropped := m.dropsStatic(eff); len(dropped) > 0 {
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: Nebula would drop static_host_map entries %s: "+
			"an underlay address inside the overlay network %s", strings.Join(dropped, ", "), m.net))
	}
	text, err := Render(eff)
	if err != nil {
		return err
	}
	if text == m.yaml {
		return m.unchanged(eff, id)
	}
	done := m.bridge.capture()
	err = m.nc.ReloadConfigString(text).Err
	logged := done()
	if err != nil { // a YAML error: Nebula changed nothing
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: Nebula refused the rendered config: %w", err))
	}
	if err := m.verify(eff, id.fingerprint); err != nil {
		return m.rollback(err, logged)
	}
	certChanged := m.fp != id.fingerprint
	m.applied, m.yaml, m.fp, m.id = eff, text, id.fingerprint, id
	m.ctrl.SetQuietPort(uint16(eff.GossipPort)) // idle.go
	m.known = knownPeers(m.known, eff)
	m.cache.forget()
	m.closeBlocked(eff.Blocklist)
	if certChanged {
		m.log.Debug("certificate changed: re-handshaking every tunnel", "tunnels", m.rekeyTunnels()) // rekey.go
	}
	m.log.Info("overlay reloaded", "lighthouses", len(eff.Lighthouses), "static_hosts", len(eff.StaticHosts),
		"blocklist", len(eff.Blocklist), "cert_expires", id.expires)
	return m.tunAddrs(id)
}

// unchanged is Reload of a config with nothing to apply: it still
// confirms that nothing drifted. A field Nebula is not given (Roaming, an
// MTU in userspace mode) is tracked from here on.
func (m *Mesh) unchanged(eff Config, id identity) error {
	if err := m.verify(eff, id.fingerprint); err != nil {
		return codes.Wrap(codes.OverlayApply, err)
	}
	m.applied, m.known = eff, knownPeers(m.known, eff)
	m.cache.forget()
	return m.tunAddrs(id)
}

// tunAddrs is addTunAddrs for the certificate a reload applied; a failure
// is codes.OverlayApply (the config stays applied: the IPv4 overlay works,
// the address is tried again on the next reload).
func (m *Mesh) tunAddrs(id identity) error {
	err := m.addTunAddrs(id.networks)
	m.tunRetry = err != nil
	if err != nil {
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w", err))
	}
	return nil
}

// rollback reloads the config that ran before a reload that failed
// verification, and reports the failure with what Nebula logged meanwhile.
func (m *Mesh) rollback(cause error, logged []string) error {
	said := ""
	if len(logged) > 0 {
		said = " (Nebula logged: " + strings.Join(logged, "; ") + ")"
	}
	prev, err := m.appliedText()
	if err == nil {
		err = m.nc.ReloadConfigString(prev).Err
	}
	if err != nil {
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w%s; restoring the previous config failed: %v", cause, said, err))
	}
	if err := m.verify(m.applied, m.fp); err != nil {
		return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w%s; the restored config does not verify either: %v", cause, said, err))
	}
	m.log.Warn("overlay reload rolled back", keyCode, codes.OverlayApply, keyErr, cause)
	return codes.Wrap(codes.OverlayApply, fmt.Errorf("reload overlay: %w%s; the previous config is running again", cause, said))
}

// appliedText is Render(m.applied): m.yaml, or rendered again when a delta
// (applyDelta) applied since the last full reload left it empty.
func (m *Mesh) appliedText() (string, error) {
	if m.yaml != "" {
		return m.yaml, nil
	}
	return Render(m.applied)
}

// Verify reads the running instance's state back and compares it with c,
// returning codes.OverlayApply on a mismatch. Nebula's Control API lets it
// check:
//
//   - the certificate Nebula uses (GetCertByVpnIp of the own address): its
//     fingerprint must equal that of c.Cert. This catches a certificate
//     Nebula refused on reload (another curve or network).
//   - the static_host_map entries it can read without a side effect: each
//     underlay address must be among the addresses Nebula holds for that
//     overlay address as static (QueryLighthouse, owner = self). On a
//     lighthouse that is every entry; on any other node it is the
//     lighthouses' entries only, because QueryLighthouse of any other
//     address sends a query to every lighthouse, and each lighthouse then
//     tells that host to punch towards this node and (punchy.respond) to
//     handshake with it: one reload of a worker holding N static hosts cost
//     N×3 queries and up to N handshakes, and a 50-join burst about 10,000
//     (docs/performance.md). There, the one way Nebula v1.10.3 drops an
//     entry without a word (an underlay address inside the overlay
//     network; meshd sets no remote_allow_list, the other way) is checked
//     before anything is applied (see dropsStatic). Presence only: Nebula
//     keeps addresses of removed entries in its cache, so removals cannot
//     be read back.
//   - in kernel mode, the kernel routes of the unsafe routes with Install:
//     each must be on the TUN device (see missingRoutes).
//
// It cannot read back lighthouse.hosts, the blocklist, the firewall, the
// unsafe routes Nebula holds, listen.so_mark or the timers: Control does
// not expose them. Render always puts every lighthouse into
// static_host_map, which is the only thing Nebula checks about
// lighthouse.hosts on reload, inspect checks that the CA bundle parses,
// and Validate refuses every unsafe route Nebula's parser would (one
// inside the overlay network), so none of the three can be silently
// refused.
func (m *Mesh) Verify(c Config) error {
	fp, _, err := pki.NebulaCertInfo(c.Cert)
	if err != nil {
		return codes.Wrap(codes.ConfigInvalid, fmt.Errorf("verify overlay: %w", err))
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return codes.Wrap(codes.OverlayApply, errors.New("verify overlay: the overlay is stopped"))
	}
	if err := m.verify(c.withoutSelf(m.self), fp); err != nil {
		return codes.Wrap(codes.OverlayApply, err)
	}
	return nil
}

// verify is Verify for a config already without the own address. The
// caller holds m.mu and has checked that the instance runs: QueryLighthouse
// blocks forever on a stopped instance.
func (m *Mesh) verify(c Config, fingerprint string) error {
	if err := m.verifyCert(fingerprint); err != nil {
		return err
	}
	want := staticHostMap(c)
	ips := make([]netip.Addr, 0, len(want))
	for ip := range want {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	lighthouses := lighthouseIPs(c)
	var missing []string
	for _, ip := range ips {
		if !c.AmLighthouse && !slices.Contains(lighthouses, ip) {
			// Reading it back would query the lighthouses: check the rule
			// by which Nebula would have dropped it instead.
			for _, a := range want[ip] {
				if m.net.Contains(a.Addr()) {
					missing = append(missing, ip.String()+"="+a.String())
				}
			}
			continue
		}
		have := m.staticRemotes(ip)
		for _, a := range want[ip] {
			if !slices.Contains(have, a) {
				missing = append(missing, ip.String()+"="+a.String())
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("verify overlay: Nebula does not hold static_host_map entries %s", strings.Join(missing, ", "))
	}
	routes, err := m.missingRoutes(c)
	if err != nil {
		return fmt.Errorf("verify overlay: %w", err)
	}
	if len(routes) > 0 {
		return fmt.Errorf("verify overlay: no kernel route on %s for the unsafe routes %s", m.tunDev, strings.Join(routes, ", "))
	}
	return nil
}

// verifyCert checks that Nebula runs the certificate with fingerprint:
// verify's and verifyDelta's first check. The caller holds m.mu.
func (m *Mesh) verifyCert(fingerprint string) error {
	crt := m.ctrl.GetCertByVpnIp(m.self)
	if crt == nil {
		return fmt.Errorf("verify overlay: Nebula reports no certificate for %s", m.self)
	}
	got, err := crt.Fingerprint()
	if err != nil {
		return fmt.Errorf("verify overlay: fingerprint of the running certificate: %w", err)
	}
	if got != fingerprint {
		return fmt.Errorf("verify overlay: Nebula runs certificate %s, the config has %s", got, fingerprint)
	}
	return nil
}

// dropsStatic lists the entries of c's static_host_map that Nebula would
// drop without a word: an underlay address inside the node's overlay
// network (Nebula's LightHouse.shouldAdd; the other reason, a
// remote_allow_list, meshd never sets).
func (m *Mesh) dropsStatic(c Config) []string {
	var out []string
	for ip, addrs := range staticHostMap(c) {
		for _, a := range addrs {
			if m.net.Contains(a.Addr()) {
				out = append(out, ip.String()+"="+a.String())
			}
		}
	}
	slices.Sort(out)
	return out
}

// staticRemotes returns the underlay addresses Nebula holds for ip from
// its own static_host_map (the cache entries this node owns).
func (m *Mesh) staticRemotes(ip netip.Addr) []netip.AddrPort {
	cm := m.ctrl.QueryLighthouse(ip)
	if cm == nil {
		return nil
	}
	own := (*cm)[m.self.String()]
	if own == nil {
		return nil
	}
	return own.Reported
}
