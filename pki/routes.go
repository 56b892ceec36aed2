package pki

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/slackhq/nebula/cert"
)

// ExitRoute is the route an exit node carries: 0.0.0.0/0, every IPv4
// address.
func ExitRoute() netip.Prefix { return netip.PrefixFrom(netip.IPv4Unspecified(), 0) }

// CheckRoute checks one prefix a node may route for the overlay (a Nebula
// unsafe network): a valid IPv4 prefix with no host bits set, which does
// not overlap the overlay networks, unless it is ExitRoute. The exit route
// contains the overlay, but for an overlay address the longer overlay
// route wins, in the kernel and in Nebula. The error names the prefix.
//
// Nebula checks no overlap in a certificate, and in tun.unsafe_routes
// refuses only a prefix that starts inside the overlay. But a node whose
// certificate holds a prefix containing overlay addresses passes its
// peers' remote-address check when it sends from any of them, so a
// supernet of the overlay is refused here too unless it is the exit
// route, without which there is no exit node.
func CheckRoute(p netip.Prefix, overlay []netip.Prefix) error {
	if !p.IsValid() {
		return fmt.Errorf("route %v: not a valid prefix", p)
	}
	if !p.Addr().Is4() {
		return fmt.Errorf("route %s: not IPv4 (Nebula v1 certificates and meshd's overlay are IPv4-only)", p)
	}
	if p != p.Masked() {
		return fmt.Errorf("route %s: host bits set, want %s", p, p.Masked())
	}
	if p == ExitRoute() {
		return nil
	}
	for _, o := range overlay {
		if p.Overlaps(o) {
			return fmt.Errorf("route %s overlaps the overlay network %s", p, o.Masked())
		}
	}
	return nil
}

// CheckRoutes checks each of routes with CheckRoute and refuses a prefix
// listed twice.
func CheckRoutes(routes []netip.Prefix, overlay []netip.Prefix) error {
	seen := make(map[netip.Prefix]bool, len(routes))
	for _, p := range routes {
		if err := CheckRoute(p, overlay); err != nil {
			return err
		}
		if seen[p] {
			return fmt.Errorf("route %s listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

// NebulaRoutes returns the unsafe networks of a PEM Nebula host
// certificate (the routes SignNebula put there), sorted by
// netip.Prefix.Compare; nil for none.
func NebulaRoutes(certPEM []byte) ([]netip.Prefix, error) {
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parse Nebula certificate: %w", err)
	}
	if c.IsCA() {
		return nil, errors.New("Nebula routes: a CA certificate, not a host certificate")
	}
	routes := c.UnsafeNetworks()
	if len(routes) == 0 {
		return nil, nil
	}
	out := slices.Clone(routes)
	slices.SortFunc(out, netip.Prefix.Compare)
	return out, nil
}
