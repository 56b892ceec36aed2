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
	if outside := outsideOverlay(maskedAll(c.Networks())); len(outside) > 0 && len(out) >= len(outside) &&
		slices.Equal(out[len(out)-len(outside):], outside) {
		out = append(out[:len(out)-len(outside)], ExitRoute())
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return out, nil
}

// certRoutes are the unsafe networks a certificate holds for routes:
// each as it is, except the exit route, which becomes every IPv4 address
// outside the overlay (outsideOverlay). A certificate holding 0.0.0.0/0
// would let its node send from any overlay address: every peer's Nebula
// accepts a packet whose source is inside the sender's unsafe networks,
// so an exit node could speak as another member, to its gossip among
// others (which trusts an overlay address because Nebula vouches for it).
// NebulaRoutes folds the set back into the exit route.
//
// The certificate lists the other routes first, in the order given, then
// the exit route's prefixes in the order outsideOverlay gives them, so a
// route equal to one of those (10.43.0.0/16 beside a 10.42.0.0/16
// overlay) is still read back.
func certRoutes(routes, overlay []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	exit := false
	for _, p := range routes {
		if p == ExitRoute() {
			exit = true
			continue
		}
		out = append(out, p)
	}
	if exit {
		out = append(out, outsideOverlay(maskedAll(overlay))...)
	}
	return out
}

// outsideOverlay is every IPv4 address outside the overlay networks, as
// the fewest prefixes: for a /16 overlay, sixteen.
func outsideOverlay(overlay []netip.Prefix) []netip.Prefix {
	var v4 []netip.Prefix
	for _, o := range overlay {
		if o.Addr().Is4() {
			v4 = append(v4, o)
		}
	}
	if len(v4) == 0 {
		return nil
	}
	var out []netip.Prefix
	var walk func(p netip.Prefix)
	walk = func(p netip.Prefix) {
		inside, touches := false, false
		for _, o := range v4 {
			if o.Bits() <= p.Bits() && o.Contains(p.Addr()) {
				inside = true
			}
			if p.Overlaps(o) {
				touches = true
			}
		}
		switch {
		case inside:
		case !touches:
			out = append(out, p)
		default:
			lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
			hiAddr := p.Addr().As4()
			hiAddr[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
			walk(lo)
			walk(netip.PrefixFrom(netip.AddrFrom4(hiAddr), p.Bits()+1))
		}
	}
	walk(ExitRoute())
	return out
}

func maskedAll(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = p.Masked()
	}
	return out
}
