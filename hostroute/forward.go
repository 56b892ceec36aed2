package hostroute

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/codes"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Forward is what a node that carries routes (a subnet router or an exit
// node) needs from its kernel.
type Forward struct {
	TunDev  string         // the Nebula TUN device, e.g. "meshd0"
	Overlay netip.Prefix   // the cluster overlay network (e.g. 10.42.0.0/16): only its sources are masqueraded
	Routed  []netip.Prefix // the prefixes this node carries now; 0.0.0.0/0 for an exit node
}

// validate refuses what no kernel could carry: a missing TUN device name,
// or an overlay or routed prefix that is not IPv4.
func (f Forward) validate() error {
	if f.TunDev == "" {
		return codes.Errorf(codes.HostRouteInvalid, "forward: no TUN device named")
	}
	if !f.Overlay.IsValid() || !f.Overlay.Addr().Is4() {
		return codes.Errorf(codes.HostRouteInvalid, "forward: overlay %s is not an IPv4 prefix", f.Overlay)
	}
	for _, p := range f.Routed {
		if !p.IsValid() || !p.Addr().Is4() {
			return codes.Errorf(codes.HostRouteInvalid, "forward: routed prefix %s is not an IPv4 prefix (hostroute is IPv4 only)", p)
		}
	}
	return nil
}

// ApplyForward makes the kernel match f exactly; it is idempotent, and
// calling it again with another f changes the kernel to match that one:
//
//   - forwarding is on for TunDev and for every egress interface, each
//     interface the kernel routes a Routed prefix through (the route to the
//     prefix's first address, as `ip route get` finds it; for 0.0.0.0/0 the
//     main table's default routes). The value each had before is
//     remembered; an interface this f no longer needs gets its value back.
//   - table ip meshd holds one masquerade rule per routed prefix and egress
//     interface, for sources in Overlay only, replaced whole in one
//     nftables transaction, so a change never leaves a gap or a duplicate.
//
// A prefix the kernel delivers locally (one of this host's own addresses)
// needs neither and gets neither. A prefix that is not IPv4, has no route
// here or is routed into TunDev fails with codes.HostRouteInvalid, before
// anything changes; a refusal of the kernel is codes.HostRouteApply, and
// may leave part of the change made: call ApplyForward again, or
// RemoveForward. With no Routed prefixes ApplyForward is RemoveForward.
func (h *Host) ApplyForward(f Forward) error {
	if len(f.Routed) == 0 {
		return h.RemoveForward()
	}
	if err := f.validate(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()

	tun, err := netlink.LinkByName(f.TunDev)
	if err != nil {
		return codes.Errorf(codes.HostRouteApply, "forward: find the TUN device %s: %w", f.TunDev, err)
	}
	want := map[int]string{tun.Attrs().Index: tun.Attrs().Name}
	var ms []masq
	for _, p := range f.Routed {
		links, err := egress(p.Masked(), tun.Attrs())
		if err != nil {
			return err
		}
		for _, l := range links {
			want[l.Index] = l.Name
			ms = append(ms, masq{Prefix: p.Masked(), Egress: l.Name})
		}
	}
	for _, index := range slices.Sorted(maps.Keys(want)) {
		if err := h.forwardOn(index, want[index]); err != nil {
			return err
		}
	}
	if err := replaceTable(f.Overlay, sortMasq(ms)); err != nil {
		return codes.Errorf(codes.HostRouteApply, "forward: replace nftables table ip %s (%d masquerade rules for %s): %w", nftTable, len(ms), f.Overlay, err)
	}
	if err := h.restore(want); err != nil {
		return codes.Wrap(codes.HostRouteApply, err)
	}
	return nil
}

// RemoveForward deletes table ip meshd and puts back the forwarding values
// ApplyForward changed. It is safe to call when nothing was applied, and
// deletes a table a previous meshd process left; the forwarding values of a
// previous process are not known (see the package comment on crashes).
func (h *Host) RemoveForward() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	if err := deleteTable(); err != nil {
		errs = append(errs, fmt.Errorf("forward: delete nftables table ip %s: %w", nftTable, err))
	}
	if err := h.restore(nil); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return codes.Wrap(codes.HostRouteApply, errors.Join(errs...))
	}
	return nil
}

// egress returns the interfaces the kernel routes p through: the route to
// p's first address, or for 0.0.0.0/0 the main table's default routes
// (the route to 0.0.0.0 itself is a local one). None for a prefix this
// host delivers locally.
func egress(p netip.Prefix, tun *netlink.LinkAttrs) ([]*netlink.LinkAttrs, error) {
	var indexes []int
	if p.Bits() == 0 {
		var err error
		if indexes, err = defaultLinks(); err != nil {
			return nil, err
		}
	} else {
		rs, err := netlink.RouteGet(net.IP(p.Addr().AsSlice()))
		if err != nil || len(rs) == 0 {
			return nil, codes.Errorf(codes.HostRouteInvalid, "forward: no route to %s (%s) on this host: %v", p, p.Addr(), err)
		}
		if rs[0].Type == unix.RTN_LOCAL {
			return nil, nil
		}
		indexes = []int{rs[0].LinkIndex}
	}
	var out []*netlink.LinkAttrs
	for _, i := range indexes {
		if i == tun.Index {
			return nil, codes.Errorf(codes.HostRouteInvalid, "forward: %s is routed through %s, the overlay's own TUN device", p, tun.Name)
		}
		l, err := netlink.LinkByIndex(i)
		if err != nil {
			return nil, codes.Errorf(codes.HostRouteApply, "forward: find interface %d, the way to %s: %w", i, p, err)
		}
		out = append(out, l.Attrs())
	}
	return out, nil
}

// defaultLinks returns the interfaces of the main table's IPv4 default
// routes (every next hop of a multipath one), without duplicates.
func defaultLinks() ([]int, error) {
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, codes.Errorf(codes.HostRouteApply, "forward: list the main routing table: %w", err)
	}
	var out []int
	for _, r := range rs {
		if r.Type != unix.RTN_UNICAST || (r.Dst != nil && !isDefault(r.Dst)) {
			continue
		}
		if r.LinkIndex > 0 {
			out = append(out, r.LinkIndex)
		}
		for _, nh := range r.MultiPath {
			out = append(out, nh.LinkIndex)
		}
	}
	if len(out) == 0 {
		return nil, codes.Errorf(codes.HostRouteInvalid, "forward: 0.0.0.0/0: the main routing table has no default route to carry it")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// isDefault reports whether n is 0.0.0.0/0.
func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// forwardOn turns IPv4 forwarding on for interface index (name), first
// remembering the value it had unless meshd changed it already.
func (h *Host) forwardOn(index int, name string) error {
	cur, err := forwarding(index)
	if err != nil {
		return codes.Errorf(codes.HostRouteApply, "forward: read IPv4 forwarding of %s: %w", name, err)
	}
	if _, ok := h.saved[index]; !ok {
		h.saved[index] = savedForwarding{name: name, value: cur}
	}
	if cur == 1 {
		return nil
	}
	if err := setForwarding(index, 1); err != nil {
		return codes.Errorf(codes.HostRouteApply, "forward: turn IPv4 forwarding on for %s: %w", name, err)
	}
	return nil
}

// restore puts back the remembered forwarding value of every interface
// not in keep, and forgets it. An interface that is gone is forgotten; one
// the kernel refused stays remembered, for the next call.
func (h *Host) restore(keep map[int]string) error {
	var errs []error
	for _, index := range slices.Sorted(maps.Keys(h.saved)) {
		if _, ok := keep[index]; ok {
			continue
		}
		s := h.saved[index]
		if err := setForwarding(index, s.value); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("forward: put IPv4 forwarding of %s back to %d: %w", s.name, s.value, err))
			continue
		}
		delete(h.saved, index)
	}
	return errors.Join(errs...)
}
