package mesh

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"

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

// ChooseUnderlay picks this node's underlay IP (DESIGN §10).
//
// A pin decides, and fails closed with codes.AdvertiseAddr when it is not
// on this machine: an address must be assigned to an interface (any
// 127.0.0.0/8 address counts: Linux routes the whole block to lo); an
// interface must exist, be up and carry an IPv4 address.
//
// Without a pin, a joiner (seeds given) takes the source address of the
// kernel's route to the first seed that has one (a netlink route lookup,
// like `ip route get SEED`); init (no seeds) takes the address of the
// default route's interface. When there is no such route (a test
// namespace has no default route), it falls back to the first up,
// non-loopback IPv4 address, private ranges first, then by interface
// index and address, and says so in Why.
func ChooseUnderlay(pin Pin, seeds []netip.Addr) (Underlay, error) {
	if !pin.IsZero() {
		return choosePinned(pin)
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
	ip, err := firstUsable()
	if err != nil {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%s, and %w", reason, err))
	}
	return Underlay{Addr: ip, Why: fmt.Sprintf("%s; chose %s, the first up IPv4 address (private first, then by interface index): pass --advertise-addr or --advertise-iface to choose", reason, ip)}, nil
}

// choosePinned resolves a pin, or fails closed.
func choosePinned(pin Pin) (Underlay, error) {
	if pin.Iface == "" {
		ip, err := checkPinnedAddr(pin.Addr)
		if err != nil {
			return Underlay{}, err
		}
		return Underlay{Addr: ip, Why: fmt.Sprintf("pinned with --advertise-addr (or advertise_addr) %s", ip)}, nil
	}
	link, err := netlink.LinkByName(pin.Iface)
	if err != nil {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %q: no such interface on this machine", pin.Iface))
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %s is down", pin.Iface))
	}
	addrs, err := linkIPv4(link)
	if err != nil {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %s: %w", pin.Iface, err))
	}
	if len(addrs) == 0 {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("interface %s has no IPv4 address", pin.Iface))
	}
	if pin.Addr == "" {
		return Underlay{Addr: addrs[0], Why: fmt.Sprintf("pinned with --advertise-iface (or advertise_iface) %s: its first IPv4 address", pin.Iface)}, nil
	}
	ip, err := netip.ParseAddr(pin.Addr)
	if err != nil {
		return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%q is not an IP address", pin.Addr))
	}
	for _, a := range addrs {
		if a == ip.Unmap() {
			return Underlay{Addr: a, Why: fmt.Sprintf("pinned with --advertise-addr %s on --advertise-iface %s", a, pin.Iface)}, nil
		}
	}
	return Underlay{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%s is not an address of interface %s", ip, pin.Iface))
}

// checkPinnedAddr accepts an address assigned to this machine.
func checkPinnedAddr(pinned string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(pinned)
	if err != nil {
		return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%q is not an IP address", pinned))
	}
	ip = ip.Unmap()
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
		routes, err := netlink.RouteGet(seed.AsSlice())
		if err != nil || len(routes) == 0 {
			failed = append(failed, fmt.Sprintf("%s: %v", seed, cmpErr(err, "no route")))
			continue
		}
		r := routes[0]
		src, dev, err := routeSource(r)
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

// byDefaultRoute is the address of the default route's interface: the
// route's own source address if it names one, else the interface's first
// IPv4 address. With several default routes, the lowest metric wins.
func byDefaultRoute() (u Underlay, why string, ok bool) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return Underlay{}, fmt.Sprintf("the routing table could not be read (%v)", err), false
	}
	var best *netlink.Route
	for i, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if best == nil || r.Priority < best.Priority {
			best = &routes[i]
		}
	}
	if best == nil {
		return Underlay{}, "no default route", false
	}
	src, dev, err := routeSource(*best)
	if err != nil {
		return Underlay{}, fmt.Sprintf("the default route: %v", err), false
	}
	route := describeRoute("default", *best, dev, src)
	return Underlay{Addr: src, Route: route,
		Why: fmt.Sprintf("the address of the default route's interface %s (%s)", dev, route)}, "", true
}

// routeSource is a route's source address, or its interface's first IPv4
// address when the route names none, and the interface's name.
func routeSource(r netlink.Route) (netip.Addr, string, error) {
	link, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("interface %d of the route: %w", r.LinkIndex, err)
	}
	dev := link.Attrs().Name
	if src, ok := netip.AddrFromSlice(r.Src); ok && src.Unmap().IsValid() && !src.Unmap().IsUnspecified() {
		return src.Unmap(), dev, nil
	}
	addrs, err := linkIPv4(link)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, dev, fmt.Errorf("interface %s of the route has no IPv4 address", dev)
	}
	return addrs[0], dev, nil
}

// linkIPv4 lists a link's IPv4 addresses that may be advertised (no
// link-local), in the kernel's order (the primary first).
func linkIPv4(link netlink.Link) ([]netip.Addr, error) {
	as, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if ip = ip.Unmap(); ok && ip.Is4() && !ip.IsLinkLocalUnicast() {
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
// IPv4 addresses, private ranges first, then by interface index and
// address.
func firstUsable() (netip.Addr, error) {
	local, err := localAddrs()
	if err != nil {
		return netip.Addr{}, err
	}
	var cands []candidate
	for _, c := range local {
		if c.ip.Is4() && !c.ip.IsLoopback() && !c.ip.IsLinkLocalUnicast() && c.up {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return netip.Addr{}, errors.New("no usable IPv4 address on any interface; pass --advertise-addr")
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
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

// IsLocal reports whether ip can be bound as a source address here.
func IsLocal(ip netip.Addr) bool {
	if ip.IsLoopback() {
		return true
	}
	local, err := localAddrs()
	return err == nil && containsAddr(local, ip)
}

type candidate struct {
	ip    netip.Addr
	index int
	up    bool
}

func localAddrs() ([]candidate, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []candidate
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			pn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(pn.IP)
			if !ok {
				continue
			}
			out = append(out, candidate{ip: ip.Unmap(), index: ifc.Index, up: ifc.Flags&net.FlagUp != 0})
		}
	}
	return out, nil
}

func containsAddr(cs []candidate, ip netip.Addr) bool {
	for _, c := range cs {
		if c.ip == ip {
			return true
		}
	}
	return false
}
