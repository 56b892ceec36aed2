package mesh

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/codes"
)

// Pin is the operator's choice of underlay address: an IP
// (--advertise-addr, advertise_addr), an interface (--advertise-iface,
// advertise_iface), or both (the IP must then be on that interface).
type Pin struct {
	Addr  string
	Iface string
}

// IsZero reports whether nothing is pinned.
func (p Pin) IsZero() bool { return p.Addr == "" && p.Iface == "" }

// Underlay is the chosen underlay address and why it was chosen, in words
// an operator reads in `meshctl join --plan` and `meshctl init`.
type Underlay struct {
	Addr netip.Addr
	// Why says how Addr was chosen: the pin, the route (with Route), or
	// the fallback and its reason.
	Why string
	// Route is the kernel's route the address came from, as `ip route`
	// would print it ("10.0.0.1 via 10.0.0.254 dev eth0 src 10.0.0.5");
	// empty when none decided.
	Route string
}

// ChooseUnderlay picks this node's underlay IP (DESIGN §10), IPv4 or
// IPv6.
//
// A pin decides, and fails closed with codes.AdvertiseAddr when it is not
// on this machine: an address must be assigned to an interface (any
// 127.0.0.0/8 address counts: Linux routes the whole block to lo); an
// interface must exist, be up and carry an address. A pinned address of
// a family none of the seeds has fails closed with codes.UnderlayFamily;
// an interface pin takes its first address of the seeds' family.
//
// Without a pin, a joiner (seeds given) takes the source address of the
// kernel's route to the first seed that has one (a netlink route lookup,
// like `ip route get SEED`), so the family follows the seed; init (no
// seeds) takes the address of the default route's interface, the IPv4
// default route first, then the IPv6 one. When there is no such route (a
// test namespace has no default route), it falls back to the first up,
// non-loopback, non-link-local address of the seeds' family (without
// seeds: IPv4 first, then IPv6), private ranges (and IPv6 unique local
// addresses) first, then by interface index and address, and says so in
// Why.
func ChooseUnderlay(pin Pin, seeds []netip.Addr) (Underlay, error) {
	if !pin.IsZero() {
		return choosePinned(pin, seeds)
	}
	var reason string
	if len(seeds) > 0 {
		u, why, ok := bySeedRoute(seeds)
		if ok {
			return u, nil
		}
		reason = why
	} else {
		u, why, ok := byDefaultRoute()
		if ok {
			return u, nil
		}
		reason = why
	}
	fams := familiesFor(seeds)
	ip, err := firstUsable(fams)
	if err != nil {
		if other, oerr := firstUsable(otherFamilies(fams)); len(seeds) > 0 && oerr == nil {
			// This host has the other family only: an IPv4-only host
			// given IPv6-only seeds, or the reverse. No pin can help.
			return Underlay{}, codes.Wrap(codes.UnderlayFamily, fmt.Errorf("%s: this host has no usable %s address (it has %s %s), and the token's seeds are %s only (%s)",
				reason, familyNames(fams), familyOf(other), other, familyNames(fams), joinAddrs(seeds)))
		}
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%s, and %w", reason, err))
	}
	return Underlay{Addr: ip, Why: fmt.Sprintf("%s; chose %s, the first up %s address (private first, then by interface index): pass --advertise-addr or --advertise-iface to choose",
		reason, ip, familyNames(fams))}, nil
}

// choosePinned resolves a pin, or fails closed.
func choosePinned(pin Pin, seeds []netip.Addr) (Underlay, error) {
	if pin.Iface == "" {
		ip, err := checkPinnedAddr(pin.Addr, seeds)
		if err != nil {
			return Underlay{}, err
		}
		return Underlay{Addr: ip, Why: fmt.Sprintf("pinned with --advertise-addr (or advertise_addr) %s", ip)}, nil
	}
	var want netip.Addr
	if pin.Addr != "" {
		ip, err := netip.ParseAddr(pin.Addr)
		if err != nil {
			return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%q is not an IP address", pin.Addr))
		}
		want = ip.Unmap()
		if err := checkFamily(want, seeds); err != nil {
			return Underlay{}, err
		}
	}
	link, err := netlink.LinkByName(pin.Iface)
	if err != nil {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %q: no such interface on this machine", pin.Iface))
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %s is down", pin.Iface))
	}
	var all []netip.Addr
	for _, f := range []family{family4, family6} {
		addrs, err := linkAddrs(link, f)
		if err != nil {
			return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %s: %w", pin.Iface, err))
		}
		all = append(all, addrs...)
	}
	if len(all) == 0 {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %s has no IPv4 or IPv6 address", pin.Iface))
	}
	if want.IsValid() {
		if slices.Contains(all, want) {
			return Underlay{Addr: want, Why: fmt.Sprintf("pinned with --advertise-addr %s on --advertise-iface %s", want, pin.Iface)}, nil
		}
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%s is not an address of interface %s", want, pin.Iface))
	}
	for _, f := range familiesFor(seeds) {
		for _, a := range all {
			if familyOf(a) == f {
				return Underlay{Addr: a, Why: fmt.Sprintf("pinned with --advertise-iface (or advertise_iface) %s: its first %s address", pin.Iface, f)}, nil
			}
		}
	}
	return Underlay{}, codes.Wrap(codes.UnderlayFamily, fmt.Errorf("interface %s has no %s address, the token's seeds' family (%s)",
		pin.Iface, familyNames(familiesFor(seeds)), joinAddrs(seeds)))
}

// checkPinnedAddr accepts an address assigned to this machine, of a
// family the seeds have (checkFamily).
func checkPinnedAddr(pinned string, seeds []netip.Addr) (netip.Addr, error) {
	ip, err := netip.ParseAddr(pinned)
	if err != nil {
		return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%q is not an IP address", pinned))
	}
	ip = ip.Unmap()
	if ip.Zone() != "" || ip.Is6() && ip.IsLinkLocalUnicast() {
		return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%s is an IPv6 link-local address: it means nothing off its link without a zone, so it cannot be advertised", ip))
	}
	if err := checkFamily(ip, seeds); err != nil {
		return netip.Addr{}, err
	}
	if ip.IsLoopback() {
		return ip, nil
	}
	local, err := localAddrs()
	if err != nil {
		return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, err)
	}
	if !ip.IsUnspecified() && containsAddr(local, ip) {
		return ip, nil
	}
	return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%s is not assigned to any interface of this machine", ip))
}

// bySeedRoute is the source address of the kernel's route to the first
// seed that has a route; why says what failed when none has.
func bySeedRoute(seeds []netip.Addr) (u Underlay, why string, ok bool) {
	var failed []string
	for _, seed := range seeds {
		routes, err := routeGet(seed)
		if err != nil || len(routes) == 0 {
			failed = append(failed, fmt.Sprintf("%s: %v", seed, cmpErr(err, "no route")))
			continue
		}
		r := routes[0]
		src, dev, err := routeSource(r, familyOf(seed))
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", seed, err))
			continue
		}
		route := describeRoute(seed.String(), r, dev, src)
		return Underlay{Addr: src, Route: route,
			Why: fmt.Sprintf("the source address of the kernel's route to seed %s (%s)", seed, route)}, "", true
	}
	return Underlay{}, "no route to any seed (" + strings.Join(failed, "; ") + ")", false
}

// routeGet is netlink.RouteGet for dst, asked a second time when the
// first request fails with EBADF or EINTR: each request opens and closes a
// netlink socket of its own, and make test once saw a request to an IPv6
// seed fail with "bad file descriptor" in a test process whose earlier
// tests had run and stopped Nebula instances (mesh.TestChooseUnderlayBySeedRoute
// in a fresh-clone CI run, 2026-12-05; not reproduced, cause not found). A
// second failure is the answer.
func routeGet(dst netip.Addr) ([]netlink.Route, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if errors.Is(err, unix.EBADF) || errors.Is(err, unix.EINTR) {
		routes, err = netlink.RouteGet(dst.AsSlice())
	}
	return routes, err
}

// byDefaultRoute is the address of the default route's interface: the
// route's own source address if it names one, else the interface's first
// address of the route's family. The IPv4 default route goes first, then
// the IPv6 one; with several default routes of a family, the lowest metric
// wins.
func byDefaultRoute() (u Underlay, why string, ok bool) {
	var failed []string
	for _, f := range []family{family4, family6} {
		routes, err := netlink.RouteList(nil, f.netlinkFamily())
		if err != nil {
			failed = append(failed, fmt.Sprintf("the %s routing table could not be read (%v)", f, err))
			continue
		}
		best := defaultRoute(routes)
		if best == nil {
			continue
		}
		src, dev, err := routeSource(*best, f)
		if err != nil {
			failed = append(failed, fmt.Sprintf("the %s default route: %v", f, err))
			continue
		}
		route := describeRoute("default", *best, dev, src)
		return Underlay{Addr: src, Route: route,
			Why: fmt.Sprintf("the address of the %s default route's interface %s (%s)", f, dev, route)}, "", true
	}
	if len(failed) == 0 {
		return Underlay{}, "no default route", false
	}
	return Underlay{}, strings.Join(failed, "; "), false
}

// defaultRoute is the default route of lowest metric among routes, nil if
// there is none: unicast, through an interface.
func defaultRoute(routes []netlink.Route) *netlink.Route {
	var best *netlink.Route
	for i, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if r.LinkIndex == 0 || r.Type != 0 && r.Type != unix.RTN_UNICAST {
			continue
		}
		if best == nil || r.Priority < best.Priority {
			best = &routes[i]
		}
	}
	return best
}

// routeSource is a route's source address, or its interface's first
// address of family f when the route names none, and the interface's
// name.
func routeSource(r netlink.Route, f family) (netip.Addr, string, error) {
	link, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("interface %d of the route: %w", r.LinkIndex, err)
	}
	dev := link.Attrs().Name
	if src, ok := netip.AddrFromSlice(r.Src); ok && src.Unmap().IsValid() && !src.Unmap().IsUnspecified() {
		return src.Unmap(), dev, nil
	}
	addrs, err := linkAddrs(link, f)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, dev, fmt.Errorf("interface %s of the route has no %s address", dev, f)
	}
	return addrs[0], dev, nil
}

// linkAddrs lists a link's addresses of family f that may be advertised
// (no link-local, none still tentative or failed duplicate address
// detection), in the kernel's order (the primary first).
func linkAddrs(link netlink.Link, f family) ([]netip.Addr, error) {
	as, err := netlink.AddrList(link, f.netlinkFamily())
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if a.IPNet == nil || a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if ip = ip.Unmap(); ok && familyOf(ip) == f && !ip.IsLinkLocalUnicast() {
			out = append(out, ip)
		}
	}
	return out, nil
}

// describeRoute prints a route as `ip route get` would.
func describeRoute(dst string, r netlink.Route, dev string, src netip.Addr) string {
	var b strings.Builder
	b.WriteString(dst)
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.Unmap().IsValid() && !gw.Unmap().IsUnspecified() {
		fmt.Fprintf(&b, " via %s", gw.Unmap())
	}
	fmt.Fprintf(&b, " dev %s src %s", dev, src)
	return b.String()
}

func cmpErr(err error, otherwise string) any {
	if err != nil {
		return err
	}
	return otherwise
}

// firstUsable is the fallback choice: up, non-loopback, non-link-local
// addresses of the families fams, in fams' order, private ranges (IPv6:
// unique local addresses) first, then by interface index and address.
func firstUsable(fams []family) (netip.Addr, error) {
	local, err := localAddrs()
	if err != nil {
		return netip.Addr{}, err
	}
	var cands []candidate
	for _, c := range local {
		if slices.Contains(fams, familyOf(c.ip)) && !c.ip.IsLoopback() && !c.ip.IsLinkLocalUnicast() && c.up {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return netip.Addr{}, fmt.Errorf("no usable %s address on any interface; pass --advertise-addr", familyNames(fams))
	}
	rank := func(ip netip.Addr) int { return slices.Index(fams, familyOf(ip)) }
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if rank(a.ip) != rank(b.ip) {
			return rank(a.ip) < rank(b.ip)
		}
		if a.ip.IsPrivate() != b.ip.IsPrivate() {
			return a.ip.IsPrivate()
		}
		if a.index != b.index {
			return a.index < b.index
		}
		return a.ip.Less(b.ip)
	})
	return cands[0].ip, nil
}
