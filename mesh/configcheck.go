package mesh

import (
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/slackhq/nebula/cert"
)

// Validate checks the shape of c without any cryptography: the PEM fields
// hold blocks of the right kind, the certificate parses, addresses and
// ports are valid, names fit, the unsafe routes fit the certificate's
// overlay network. Start and Reload additionally check that the
// certificate chains to the CA, is current, is not blocklisted and
// matches the key. The error carries codes.ConfigInvalid and a
// *ConfigError, or for a bad firewall rule codes.FirewallRule and a
// *FirewallError.
func (c Config) Validate() error {
	if err := c.validate(); err != nil {
		if codes.Of(err) != "" { // a firewall rule: codes.FirewallRule
			return err
		}
		return codes.Wrap(codes.ConfigInvalid, err)
	}
	return nil
}

func (c Config) validate() error {
	bad := func(field, value string, format string, args ...any) error {
		return &ConfigError{Field: field, Value: value, Err: fmt.Errorf(format, args...)}
	}
	certTypes := []string{cert.CertificateBanner, cert.CertificateV2Banner}
	keyTypes := []string{cert.X25519PrivateKeyBanner, cert.P256PrivateKeyBanner}
	for _, f := range []struct {
		name     string
		pem      []byte
		types    []string
		min, max int
	}{
		{"CACert", c.CACert, certTypes, 1, 1 << 10},
		{"Cert", c.Cert, certTypes, 1, 1},
		{"Key", c.Key, keyTypes, 1, 1},
	} {
		n, err := pemBlocks(f.pem, f.types)
		if err != nil {
			return bad(f.name, "", "%v", err)
		}
		if n < f.min || n > f.max {
			return bad(f.name, "", "want %d to %d PEM blocks of type %s, found %d", f.min, f.max, strings.Join(f.types, " or "), n)
		}
	}
	crt, _, err := cert.UnmarshalCertificateFromPEM(c.Cert)
	if err != nil {
		return bad("Cert", "", "parse Nebula certificate: %v", err)
	}
	if _, err := netip.ParseAddr(c.ListenHost); err != nil {
		return bad("ListenHost", c.ListenHost, "want an IP literal: %v", err)
	}
	if c.ListenPort < 0 || c.ListenPort > 65535 {
		return bad("ListenPort", fmt.Sprint(c.ListenPort), "out of range 0-65535")
	}
	if c.GossipPort < 0 || c.GossipPort > 65535 {
		return bad("GossipPort", fmt.Sprint(c.GossipPort), "out of range 0-65535")
	}
	if c.IdleTimeout < 0 || (c.IdleTimeout > 0 && c.IdleTimeout < time.Second) {
		return bad("IdleTimeout", c.IdleTimeout.String(), "want 0 (keep idle tunnels) or at least 1s")
	}
	if c.AmLighthouse && c.ListenPort == 0 {
		return bad("ListenPort", "0", "a lighthouse needs a fixed port")
	}
	seen := map[netip.Addr]bool{}
	for i, lh := range c.Lighthouses {
		field := fmt.Sprintf("Lighthouses[%d]", i)
		if !lh.OverlayIP.IsValid() {
			return bad(field+".OverlayIP", "", "missing")
		}
		if seen[lh.OverlayIP] {
			return bad(field+".OverlayIP", lh.OverlayIP.String(), "listed twice")
		}
		seen[lh.OverlayIP] = true
		if err := checkUnderlay(lh.Underlay); err != nil {
			return bad(field+".Underlay", "", "%v", err)
		}
	}
	for ip, underlay := range c.StaticHosts {
		if err := checkStaticHost(ip, underlay); err != nil {
			return err
		}
	}
	for i, r := range c.Relays {
		if !r.IsValid() {
			return bad(fmt.Sprintf("Relays[%d]", i), "", "invalid overlay address")
		}
	}
	for i, fp := range c.Blocklist {
		if err := checkFingerprint(i, fp); err != nil {
			return err
		}
	}
	if !c.Userspace {
		if c.TunDev == "" || len(c.TunDev) > 15 || strings.ContainsAny(c.TunDev, "/ \t\n%:") {
			return bad("TunDev", c.TunDev, "want an interface name of 1-15 characters")
		}
	}
	if c.MTU < 576 || c.MTU > MaxMTU {
		return bad("MTU", fmt.Sprint(c.MTU), "out of range 576-%d (Nebula's largest)", MaxMTU)
	}
	if c.Routines < 1 || c.Routines > MaxRoutines {
		return bad("Routines", fmt.Sprint(c.Routines), "out of range 1-%d", MaxRoutines)
	}
	if c.SocketBuffer < 0 {
		return bad("SocketBuffer", fmt.Sprint(c.SocketBuffer), "negative")
	}
	if c.SoMark < 0 || c.SoMark > math.MaxInt32 {
		return bad("SoMark", fmt.Sprint(c.SoMark), "out of range 0-%d", math.MaxInt32)
	}
	if err := checkUnsafeRoutes(c.UnsafeRoutes, crt); err != nil {
		return err
	}
	for _, fw := range []struct {
		dir   string
		rules []FirewallRule
	}{{"inbound", c.Inbound}, {"outbound", c.Outbound}} {
		if err := CheckFirewall(fw.dir, fw.rules); err != nil {
			return err
		}
	}
	for i, p := range c.LocalAllowList {
		if !p.IsValid() {
			return bad(fmt.Sprintf("LocalAllowList[%d]", i), p.String(), "invalid prefix")
		}
	}
	return nil
}

// checkUnsafeRoutes checks routes against the node's certificate crt: its
// overlay networks and the prefixes it carries itself.
func checkUnsafeRoutes(routes []UnsafeRoute, crt cert.Certificate) error {
	var overlay []netip.Prefix
	for _, n := range crt.Networks() {
		overlay = append(overlay, n.Masked())
	}
	seen := make(map[netip.Prefix]bool, len(routes))
	for i, r := range routes {
		field := fmt.Sprintf("UnsafeRoutes[%d]", i)
		if err := pki.CheckRoute(r.Route, overlay); err != nil {
			return &ConfigError{Field: field + ".Route", Value: r.Route.String(), Err: err}
		}
		if seen[r.Route] {
			return &ConfigError{Field: field + ".Route", Value: r.Route.String(), Err: errors.New("listed twice")}
		}
		seen[r.Route] = true
		if slices.Contains(crt.UnsafeNetworks(), r.Route) {
			// In kernel mode the route on the TUN device would replace
			// this node's own route to the prefix it carries.
			return &ConfigError{Field: field + ".Route", Value: r.Route.String(), Err: errors.New("this node's own certificate carries it")}
		}
		if !r.Via.IsValid() {
			return &ConfigError{Field: field + ".Via", Err: errors.New("missing")}
		}
		if !slices.ContainsFunc(overlay, func(o netip.Prefix) bool { return o.Contains(r.Via) }) {
			return &ConfigError{Field: field + ".Via", Value: r.Via.String(), Err: fmt.Errorf("not in the overlay network %v", overlay)}
		}
		if slices.ContainsFunc(crt.Networks(), func(n netip.Prefix) bool { return n.Addr() == r.Via }) {
			return &ConfigError{Field: field + ".Via", Value: r.Via.String(), Err: errors.New("this node's own overlay address")}
		}
	}
	return nil
}

// checkStaticHost checks one entry of Config.StaticHosts.
func checkStaticHost(ip netip.Addr, underlay []netip.AddrPort) error {
	if !ip.IsValid() {
		return &ConfigError{Field: "StaticHosts", Err: errors.New("invalid overlay address")}
	}
	if err := checkUnderlay(underlay); err != nil {
		return &ConfigError{Field: "StaticHosts[" + ip.String() + "]", Err: err}
	}
	return nil
}

// checkFingerprint checks Config.Blocklist[i].
func checkFingerprint(i int, fp string) error {
	if b, err := hex.DecodeString(fp); err != nil || len(b) != 32 || strings.ToLower(fp) != fp {
		return &ConfigError{Field: fmt.Sprintf("Blocklist[%d]", i), Value: fp, Err: errors.New("want a lower-case hex SHA-256 fingerprint")}
	}
	return nil
}

// checkUnderlay requires at least one address, each with a port.
func checkUnderlay(addrs []netip.AddrPort) error {
	if len(addrs) == 0 {
		return errors.New("no underlay address")
	}
	for _, a := range addrs {
		if !a.IsValid() || a.Port() == 0 {
			return fmt.Errorf("underlay %v: want IP:port with a non-zero port", a)
		}
	}
	return nil
}

// pemBlocks counts the PEM blocks in b, all of which must have one of the
// given types; anything but whitespace between blocks is an error.
func pemBlocks(b []byte, types []string) (int, error) {
	n := 0
	rest := b
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if !slices.Contains(types, block.Type) {
			return n, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		n++
	}
	if strings.TrimSpace(string(rest)) != "" {
		return n, errors.New("trailing data that is not PEM")
	}
	return n, nil
}
