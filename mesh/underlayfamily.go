package mesh

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/meshd/meshd/codes"
)

// family is an IP address family of the underlay.
type family int

const (
	family4 family = 4
	family6 family = 6
)

func (f family) String() string {
	if f == family6 {
		return "IPv6"
	}
	return "IPv4"
}

// netlinkFamily is f as netlink names it.
func (f family) netlinkFamily() int {
	if f == family6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// familyOf is ip's family (an IPv4-mapped IPv6 address counts as IPv4).
func familyOf(ip netip.Addr) family {
	if ip.Unmap().Is4() {
		return family4
	}
	return family6
}

// familiesFor is the order in which the underlay's families are tried:
// the seeds' families in the order the seeds name them (a joiner can only
// use a family its seeds have), or, with no seeds (init), IPv4 then IPv6.
func familiesFor(seeds []netip.Addr) []family {
	if len(seeds) == 0 {
		return []family{family4, family6}
	}
	var out []family
	for _, s := range seeds {
		if f := familyOf(s); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// checkFamily refuses, with codes.UnderlayFamily, a pinned address of a
// family none of the seeds has: the node would advertise an address its
// seeds and every node that, like them, has only the other family cannot
// reach. Without seeds (init) any family goes.
func checkFamily(ip netip.Addr, seeds []netip.Addr) error {
	if len(seeds) == 0 || slices.Contains(familiesFor(seeds), familyOf(ip)) {
		return nil
	}
	return codes.Wrap(codes.UnderlayFamily, fmt.Errorf("pinned %s is %s, but the token's seeds are %s only (%s)",
		ip, familyOf(ip), familiesFor(seeds)[0], joinAddrs(seeds)))
}

// joinAddrs lists addresses for a message.
func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// familyNames is "IPv4 or IPv6" for fams, in their order.
func familyNames(fams []family) string {
	s := make([]string, len(fams))
	for i, f := range fams {
		s[i] = f.String()
	}
	return strings.Join(s, " or ")
}

// otherFamilies are the families not in fams.
func otherFamilies(fams []family) []family {
	var out []family
	for _, f := range []family{family4, family6} {
		if !slices.Contains(fams, f) {
			out = append(out, f)
		}
	}
	return out
}
