package desired

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

var (
	lan50 = netip.MustParsePrefix("192.168.50.0/24")
	lan60 = netip.MustParsePrefix("192.168.60.0/24")
)

func routesIn() Inputs {
	return Inputs{
		SelfName: "w1", SelfOverlay: netip.MustParseAddr("10.42.0.9"), RecordsKnown: true,
		SelfUnderlay: netip.MustParseAddr("10.99.0.9"),
		Records: []Record{
			{ID: "c1", Name: "c1", Role: pki.RoleControl, Overlay: netip.MustParseAddr("10.42.0.1"),
				Underlay: netip.MustParseAddrPort("10.99.0.1:4242")},
			{ID: "r1", Name: "r1", Role: pki.RoleWorker, Overlay: netip.MustParseAddr("10.42.0.2"),
				Underlay: netip.MustParseAddrPort("10.99.0.2:4242"),
				Routes:   []RecordRoute{{Prefix: lan50, Carrier: true}, {Prefix: lan60}}},
			{ID: "r2", Name: "r2", Role: pki.RoleWorker, Overlay: netip.MustParseAddr("10.42.0.3"),
				Underlay: netip.MustParseAddrPort("10.99.0.3:4242"),
				Routes:   []RecordRoute{{Prefix: lan50}, {Prefix: lan60, Carrier: true}, {Prefix: exitPrefix, Exit: true}}},
		},
	}
}

// TestRoutesPointEachPrefixAtItsCarrier: each carried prefix goes to its
// carrier's overlay address, never to a standby; the exit route only
// when this node chose that exit node, not installed by Nebula, with the
// underlay paths excluded.
func TestRoutesPointEachPrefixAtItsCarrier(t *testing.T) {
	in := routesIn()
	got := Routes(in, Compute(in))
	want := []mesh.UnsafeRoute{
		{Route: lan50, Via: netip.MustParseAddr("10.42.0.2"), Install: true},
		{Route: lan60, Via: netip.MustParseAddr("10.42.0.3"), Install: true},
	}
	if !slices.Equal(got.Unsafe, want) || got.Exit.IsValid() || got.Excluded != nil {
		t.Fatalf("no exit: %+v, want unsafe %+v and no exit", got, want)
	}

	in.Exit = "r2"
	in.Seeds = []netip.Addr{netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.77")}
	got = Routes(in, Compute(in))
	if got.Exit != netip.MustParseAddr("10.42.0.3") || len(got.Unsafe) != 3 ||
		got.Unsafe[0] != (mesh.UnsafeRoute{Route: exitPrefix, Via: netip.MustParseAddr("10.42.0.3"), Install: false}) {
		t.Fatalf("exit r2: %+v", got)
	}
	wantEx := []netip.Prefix{netip.MustParsePrefix("10.99.0.1/32"), netip.MustParsePrefix("10.99.0.2/32"),
		netip.MustParsePrefix("10.99.0.3/32"), netip.MustParsePrefix("10.99.0.77/32")}
	if !slices.Equal(got.Excluded, wantEx) {
		t.Errorf("excluded %v, want %v", got.Excluded, wantEx)
	}

	in.Exit = "r1" // not an exit node: chosen all the same, so the default route is dropped, not sent out (fail closed)
	got = Routes(in, Compute(in))
	if got.Exit.IsValid() || slices.ContainsFunc(got.Unsafe, func(u mesh.UnsafeRoute) bool { return u.Route == exitPrefix }) {
		t.Errorf("r1 is no exit node, yet the exit route goes via %v: %+v", got.Exit, got.Unsafe)
	}
	if !got.ExitChosen || len(got.Excluded) == 0 {
		t.Errorf("an exit node chosen but not approved: chosen %v, excluded %v; want the exit routing kept (fail closed)", got.ExitChosen, got.Excluded)
	}
}

// TestRoutesExitIPv6Underlay: with an exit node chosen, only IPv4
// underlay paths are excluded from the (IPv4) exit route: an IPv6 seed or
// lighthouse (issue 34) is left as it is, which hostroute, IPv4 only,
// would otherwise refuse.
func TestRoutesExitIPv6Underlay(t *testing.T) {
	in := routesIn()
	in.Exit = "r2"
	in.Seeds = []netip.Addr{netip.MustParseAddr("fd99::1"), netip.MustParseAddr("10.99.0.77"), netip.MustParseAddr("::ffff:10.99.0.78")}
	in.Records[0].Underlay = netip.MustParseAddrPort("[fd99::2]:4242")
	got := Routes(in, Compute(in))
	if got.Exit != netip.MustParseAddr("10.42.0.3") {
		t.Fatalf("exit r2: %+v", got)
	}
	for _, p := range got.Excluded {
		if !p.Addr().Is4() || p.Bits() != 32 {
			t.Errorf("excluded %v: want IPv4 /32s only", got.Excluded)
		}
	}
	for _, want := range []string{"10.99.0.77/32", "10.99.0.78/32"} {
		if !slices.Contains(got.Excluded, netip.MustParsePrefix(want)) {
			t.Errorf("excluded %v, want %s among them", got.Excluded, want)
		}
	}
}

// TestRoutesLeaveOut: a prefix this node asks for itself, one holding
// its own underlay, and one holding a peer's underlay are not routed.
func TestRoutesLeaveOut(t *testing.T) {
	for name, change := range map[string]func(*Inputs){
		"asked by this node":        func(in *Inputs) { in.SelfRoutes = []netip.Prefix{lan50} },
		"holds this node's address": func(in *Inputs) { in.SelfUnderlay = netip.MustParseAddr("192.168.50.4") },
		"holds a peer's underlay": func(in *Inputs) {
			in.Records[0].Underlay = netip.MustParseAddrPort("192.168.50.1:4242")
		},
		"its carrier is gone": func(in *Inputs) { in.Gone = []string{"r1"} },
	} {
		in := routesIn()
		change(&in)
		for _, u := range Routes(in, Compute(in)).Unsafe {
			if u.Route == lan50 {
				t.Errorf("%s: %s is routed via %v", name, lan50, u.Via)
			}
		}
	}
}
