package desired

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/mesh"
)

// RecordRoute is a prefix a record is approved to carry (issue 33).
type RecordRoute struct {
	Prefix  netip.Prefix
	Carrier bool // raft names this node the prefix's carrier now
	Exit    bool // 0.0.0.0/0: the node is an approved exit node
}

// exitPrefix is an exit node's route.
var exitPrefix = netip.MustParsePrefix("0.0.0.0/0")

// Routed is this node's part of the cluster's routes.
type Routed struct {
	// Unsafe are Nebula's unsafe_routes: every prefix another node
	// carries now, via that node's overlay address, and the exit node's
	// default route (not installed by Nebula: agent/member's exit routing
	// does that) when this node uses one.
	Unsafe []mesh.UnsafeRoute
	// Exit is the overlay address of the exit node this node uses, when
	// it is an approved exit node on record (invalid otherwise).
	Exit netip.Addr
	// ExitChosen: this node chose an exit node (Inputs.Exit), approved on
	// record or not. The default route goes into the tunnel either way:
	// with no approved exit node there Nebula drops it, so a withdrawn or
	// removed exit node stops this node's traffic instead of letting it
	// out on the underlay (fail closed).
	ExitChosen bool
	// Excluded are the underlay addresses the exit route must leave off
	// the tunnel: every lighthouse's and static host's, and the seeds',
	// the IPv4 ones (the exit route is IPv4's).
	Excluded []netip.Prefix
}

// Routes computes Routed from the inputs and o, the overlay Compute
// gave (its lighthouses and static hosts are the underlay paths no
// route may capture). A prefix is left out when:
//   - this node asks to carry it itself (Inputs.SelfRoutes, SelfAsked):
//     a router, carrier, standby or not approved yet, reaches its LAN
//     directly;
//   - it holds this node's own underlay address: the node sits on that
//     LAN and reaches it directly;
//   - it holds the underlay address of a lighthouse or static host: the
//     tunnel to that peer would be routed into itself.
func Routes(in Inputs, o Overlay) Routed {
	gone := make(map[string]bool, len(in.Gone))
	for _, id := range in.Gone {
		gone[id] = true
	}
	var list []Record
	for _, r := range in.Records {
		if len(r.Routes) > 0 && !gone[r.ID] {
			list = append(list, r)
		}
	}
	slices.SortFunc(list, carrierOrder)
	carriers := func(yield func(Record) bool) {
		for _, r := range list {
			if !yield(r) {
				return
			}
		}
	}
	return routesOf(in, carriers, underlayPaths(o))
}

// carrierOrder is the order routesOf reads the carriers in: by name,
// then id, whatever the order of Inputs.Records (the Tracker, handed
// only the records that changed, keeps no other).
func carrierOrder(a, b Record) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
}

// routesOf is Routes over the records carriers yields (those with routes
// that are not gone, in carrierOrder), with paths the
// IPv4 underlay addresses of the lighthouses and static hosts, sorted
// (duplicates allowed): each prefix is checked against them by a binary
// search, so the cost is that of the routes, not of the peers, unless
// this node uses an exit node (Excluded lists every path). Tracker
// keeps the carriers and the paths per change (incremental.go).
func routesOf(in Inputs, carriers func(func(Record) bool), paths []netip.Addr) Routed {
	var out Routed
	mine := func(p netip.Prefix) bool {
		return slices.Contains(in.SelfRoutes, p) || slices.Contains(in.SelfAsked, p)
	}
	for r := range carriers {
		for _, rt := range r.Routes {
			switch {
			case rt.Exit:
				if in.Exit != "" && r.Name == in.Exit {
					out.Exit = r.Overlay
					out.Unsafe = append(out.Unsafe, mesh.UnsafeRoute{Route: exitPrefix, Via: r.Overlay, Install: false})
				}
				continue
			case !rt.Carrier || mine(rt.Prefix):
				continue
			case in.SelfUnderlay.IsValid() && rt.Prefix.Contains(in.SelfUnderlay):
				continue
			case holdsPath(paths, rt.Prefix):
				continue
			}
			out.Unsafe = append(out.Unsafe, mesh.UnsafeRoute{Route: rt.Prefix, Via: r.Overlay, Install: true})
		}
	}
	slices.SortFunc(out.Unsafe, func(a, b mesh.UnsafeRoute) int { return a.Route.Compare(b.Route) })
	out.Unsafe = slices.CompactFunc(out.Unsafe, func(a, b mesh.UnsafeRoute) bool { return a.Route == b.Route })
	if in.Exit != "" {
		out.ExitChosen = true
		for _, a := range append(slices.Clip(paths), in.Seeds...) {
			// The exit route is IPv4's default route: an IPv6 underlay
			// path (issue 34) never enters it, so it needs no exclusion,
			// and hostroute, IPv4 only, would refuse one.
			if a = a.Unmap(); a.Is4() {
				out.Excluded = append(out.Excluded, netip.PrefixFrom(a, a.BitLen()))
			}
		}
		slices.SortFunc(out.Excluded, netip.Prefix.Compare)
		out.Excluded = slices.Compact(out.Excluded)
	}
	return out
}

// holdsPath reports whether p holds one of paths (sorted): the first
// path not below p's first address is the one to look at.
func holdsPath(paths []netip.Addr, p netip.Prefix) bool {
	i, _ := slices.BinarySearchFunc(paths, p.Masked().Addr(), netip.Addr.Compare)
	return i < len(paths) && p.Contains(paths[i])
}

// underlayPaths are the IPv4 underlay addresses of o's lighthouses and
// static hosts.
func underlayPaths(o Overlay) []netip.Addr {
	var out []netip.Addr
	add := func(ap netip.AddrPort) {
		if a := ap.Addr().Unmap(); a.Is4() {
			out = append(out, a)
		}
	}
	for _, l := range o.Lighthouses {
		for _, u := range l.Underlay {
			add(u)
		}
	}
	for _, hs := range o.StaticHosts {
		for _, u := range hs {
			add(u)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
