package state

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// The IPv6 overlay (issue 34). A dual-stack cluster has an IPv6 prefix
// (Cluster.Overlay6, a /64 in fd00::/8 by default) besides its IPv4 one,
// and every node one address of each. The IPv6 address is not allocated
// on its own: it is the IPv6 prefix plus the IPv4 address's offset in the
// IPv4 prefix (10.42.0.5 in 10.42.0.0/16 is fd..::5 in fd..::/64), so it
// is unique exactly when the IPv4 address is, a reused record keeps it,
// and no second allocation table can drift from the first. The FSM
// records it on the node (Node.OverlayIP6) when it allocates the IPv4
// address, and for every node at once when a v2 move begins.

// MinOverlay6Bits is the shortest IPv6 overlay prefix a cluster takes: a
// /64 (RFC 4291's subnet size; a shorter one claims other subnets).
const MinOverlay6Bits = 64

// CheckOverlay6 refuses an IPv6 overlay prefix the cluster cannot use
// beside the IPv4 overlay v4: not IPv6, IPv4-mapped (it would overlap
// IPv4 space), host bits set, shorter than /64, or too long to hold an
// address for every address of v4. Each refusal carries
// codes.Overlay6Invalid. ULA (fd00::/8) is a policy of init's, not
// checked here (IsULA).
func CheckOverlay6(v4, v6 netip.Prefix) error {
	bad := func(format string, args ...any) error {
		return codes.Wrap(codes.Overlay6Invalid, fmt.Errorf("IPv6 overlay %s: "+format, append([]any{v6}, args...)...))
	}
	switch {
	case !v6.IsValid():
		return bad("not a prefix")
	case !v6.Addr().Is6() || v6.Addr().Is4In6():
		return bad("not an IPv6 prefix (an IPv4 or IPv4-mapped prefix overlaps the IPv4 overlay's space)")
	case v6.Addr().Zone() != "":
		return bad("a prefix takes no zone")
	case v6.Masked() != v6:
		return bad("host bits set; the prefix is %s", v6.Masked())
	case v6.Bits() < MinOverlay6Bits:
		return bad("shorter than /%d", MinOverlay6Bits)
	}
	if !v4.IsValid() || !v4.Addr().Is4() {
		return bad("the IPv4 overlay %s is not an IPv4 prefix", v4)
	}
	if max := 128 - (32 - v4.Bits()); v6.Bits() > max {
		return bad("longer than /%d: it cannot hold an address for each of the %d addresses of the IPv4 overlay %s", max, 1<<(32-v4.Bits()), v4)
	}
	return nil
}

// IsULA reports whether p lies in fd00::/8, the locally assigned half of
// RFC 4193's unique local addresses.
func IsULA(p netip.Prefix) bool {
	return p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() >= 8 && p.Addr().As16()[0] == 0xfd
}

// Overlay6For is the IPv6 overlay address of the node at ip4: v6 plus
// ip4's offset in v4. It is invalid when v6 is, or when ip4 is not inside
// v4.
func Overlay6For(v4, v6 netip.Prefix, ip4 netip.Addr) netip.Addr {
	ip4 = ip4.Unmap()
	if !v6.IsValid() || !v4.IsValid() || !ip4.Is4() || !v4.Contains(ip4) {
		return netip.Addr{}
	}
	base4, a4 := v4.Masked().Addr().As4(), ip4.As4()
	off := binary.BigEndian.Uint32(a4[:]) - binary.BigEndian.Uint32(base4[:])
	b := v6.Masked().Addr().As16()
	binary.BigEndian.PutUint32(b[12:], binary.BigEndian.Uint32(b[12:])+off)
	return netip.AddrFrom16(b)
}

// IPv6Overlay is the cluster's IPv6 overlay prefix now: Overlay6, or
// during a move to v2 certificates the prefix the move brings (nodes get
// their IPv6 addresses when it begins). Invalid for an IPv4-only cluster.
func (c Cluster) IPv6Overlay() netip.Prefix {
	if c.Overlay6.IsValid() {
		return c.Overlay6
	}
	if c.Rotation != nil {
		return c.Rotation.NextOverlay6
	}
	return netip.Prefix{}
}

// overlay6Of is the IPv6 overlay address of the node at ip4 in the
// cluster now (IPv6Overlay); invalid for an IPv4-only cluster.
func (s *Snapshot) overlay6Of(ip4 netip.Addr) netip.Addr {
	if s.Cluster == nil {
		return netip.Addr{}
	}
	return Overlay6For(s.Cluster.Overlay, s.Cluster.IPv6Overlay(), ip4)
}

// Overlay6Prefix is the IPv6 overlay address of n with the cluster's IPv6
// prefix length, for a certificate request; invalid when n has none.
func (c Cluster) Overlay6Prefix(n Node) netip.Prefix {
	p := c.IPv6Overlay()
	if !n.OverlayIP6.IsValid() || !p.IsValid() {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(n.OverlayIP6, p.Bits())
}

// nextOverlay6 is a rotation's begin step's check of the overlays its
// next Nebula CA holds, and the IPv6 overlay the next CA brings. A move to
// v2 (NextOverlay6 on an IPv4-only cluster) needs a dual-stack next CA of
// exactly the cluster's IPv4 overlay and the new IPv6 one; a rotation of a
// dual-stack cluster keeps its IPv6 overlay (NextOverlay6 empty or the
// same; another is codes.Overlay6Exists) and needs a next CA of both
// prefixes: dropping the IPv6 overlay is no rotation. An IPv4-only
// cluster's plain rotation is checked as before issue 34.
func (s *Snapshot) nextOverlay6(c RotateCA) (netip.Prefix, error) {
	cl := s.Cluster
	next6 := c.NextOverlay6
	switch {
	case cl.Overlay6.IsValid() && next6.IsValid() && next6 != cl.Overlay6:
		return netip.Prefix{}, codes.Wrap(codes.Overlay6Exists, fmt.Errorf("the cluster is dual-stack already (IPv6 overlay %s, not %s)", cl.Overlay6, next6))
	case cl.Overlay6.IsValid():
		next6 = cl.Overlay6
	case !next6.IsValid():
		return netip.Prefix{}, nil
	}
	if err := CheckOverlay6(cl.Overlay, next6); err != nil {
		return netip.Prefix{}, err
	}
	want := []netip.Prefix{cl.Overlay, next6}
	nets, err := pki.NebulaCANetworks(c.NextNebulaCACert)
	if err != nil || !slices.Equal(nets, want) {
		return netip.Prefix{}, codes.Wrap(codes.BadRequest, fmt.Errorf("CA rotation step begin: the next Nebula CA holds %v, want %v", nets, want))
	}
	return next6, nil
}

// assignOverlay6 records every node's IPv6 overlay address that has none
// yet, now that the cluster has an IPv6 overlay (a v2 move began).
func (s *Snapshot) assignOverlay6() {
	for id, n := range s.Nodes {
		if n.OverlayIP6.IsValid() || !n.OverlayIP.IsValid() {
			continue
		}
		if a := s.overlay6Of(n.OverlayIP); a.IsValid() {
			n.OverlayIP6 = a
			s.Nodes[id] = n
		}
	}
}

// Overlay6None is `init --overlay-cidr6 none`: an IPv4-only cluster with
// v1 certificates, as every cluster was before issue 34.
const Overlay6None = "none"

// ChooseOverlay6 is init's IPv6 overlay beside the IPv4 overlay v4 from
// `--overlay-cidr6 arg`: empty generates a ULA /64 (GenerateULA), "none"
// returns the zero prefix (an IPv4-only cluster), anything else must pass
// CheckOverlay6 and, unless global, lie in fd00::/8
// (codes.Overlay6NotULA).
func ChooseOverlay6(v4 netip.Prefix, arg string, global bool) (netip.Prefix, error) {
	switch arg {
	case Overlay6None:
		return netip.Prefix{}, nil
	case "":
		return GenerateULA()
	}
	p, err := netip.ParsePrefix(arg)
	if err != nil {
		return netip.Prefix{}, codes.Wrap(codes.Overlay6Invalid, fmt.Errorf("IPv6 overlay %q: %w", arg, err))
	}
	if err := CheckOverlay6(v4, p); err != nil {
		return netip.Prefix{}, err
	}
	if !global && !IsULA(p) {
		return netip.Prefix{}, codes.Wrap(codes.Overlay6NotULA, fmt.Errorf("IPv6 overlay %s is not in fd00::/8", p))
	}
	return p, nil
}

// GenerateULA is a /64 of RFC 4193's locally assigned unique local
// addresses: fd, a 40-bit random global ID, subnet 0 (§3.2.2 asks for a
// pseudo-random global ID; crypto/rand serves).
func GenerateULA() (netip.Prefix, error) {
	var b [16]byte
	b[0] = 0xfd
	if _, err := rand.Read(b[1:6]); err != nil {
		return netip.Prefix{}, fmt.Errorf("generate the IPv6 overlay: %w", err)
	}
	p := netip.PrefixFrom(netip.AddrFrom16(b), 64)
	if !IsULA(p) {
		return netip.Prefix{}, errors.New("generate the IPv6 overlay: not a ULA")
	}
	return p, nil
}
