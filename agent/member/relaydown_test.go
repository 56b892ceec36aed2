package member

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
)

// TestRelaysDown: a relayed tunnel is named when gossip shows the first
// relay it runs through (the one Nebula sends through) suspect, failed or
// left, whichever end this node is (a peer below it too: each end looks
// at its own list); a later relay down, a first relay gossip does not
// know or a direct tunnel is left alone.
func TestRelaysDown(t *testing.T) {
	c1, c2 := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.2")
	w2, w3, w0 := netip.MustParseAddr("10.42.0.4"), netip.MustParseAddr("10.42.0.5"), netip.MustParseAddr("10.42.0.0")
	status := map[netip.Addr]gossip.Status{c1: gossip.StatusFailed, c2: gossip.StatusAlive}
	tunnels := []mesh.Tunnel{
		{OverlayIP: w2, Relayed: true, Relays: []netip.Addr{c1}},                                                             // its only relay failed
		{OverlayIP: w3, Relayed: true, Relays: []netip.Addr{c2, c1}},                                                         // sent through c2
		{OverlayIP: w0, Relayed: true, Relays: []netip.Addr{c1}},                                                             // below self: named too
		{OverlayIP: netip.MustParseAddr("10.42.0.6"), Relayed: true, Relays: []netip.Addr{netip.MustParseAddr("10.42.0.9")}}, // relay unknown
		{OverlayIP: netip.MustParseAddr("10.42.0.7"), Remote: netip.MustParseAddrPort("10.99.0.7:4242")},                     // direct
	}
	if got := relaysDown(tunnels, status); !slices.Equal(got, []netip.Addr{w2, w0}) {
		t.Fatalf("relaysDown = %v, want [%v %v]", got, w2, w0)
	}
	for _, st := range []gossip.Status{gossip.StatusSuspect, gossip.StatusLeft} {
		status[c2] = st
		if got := relaysDown(tunnels, status); !slices.Equal(got, []netip.Addr{w2, w3, w0}) {
			t.Fatalf("with c2 %s: %v, want [%v %v %v]", st, got, w2, w3, w0)
		}
	}
	status[c1] = gossip.StatusSuspect
	status[c2] = gossip.StatusAlive
	if got := relaysDown(tunnels, status); !slices.Equal(got, []netip.Addr{w2, w0}) {
		t.Fatalf("with c1 suspect: %v, want [%v %v]", got, w2, w0)
	}
}

// TestRelaysShort: a relayed tunnel to a peer above this node that lacks a
// relay the overlay lists (other than the peer itself) is named; one
// through every relay, a direct one, or one below this node is not.
func TestRelaysShort(t *testing.T) {
	self := netip.MustParseAddr("10.42.0.3")
	c1, c2 := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.2")
	w2, w3, w4 := netip.MustParseAddr("10.42.0.4"), netip.MustParseAddr("10.42.0.5"), netip.MustParseAddr("10.42.0.6")
	tunnels := []mesh.Tunnel{
		{OverlayIP: w2, Relayed: true, Relays: []netip.Addr{c1}},     // built before c2 was listed
		{OverlayIP: w3, Relayed: true, Relays: []netip.Addr{c2, c1}}, // every relay
		{OverlayIP: w4, Relayed: true, Relays: []netip.Addr{c1}},     // w4 is a relay itself: it relays not to itself
		{OverlayIP: netip.MustParseAddr("10.42.0.0"), Relayed: true, Relays: []netip.Addr{c1}},
		{OverlayIP: netip.MustParseAddr("10.42.0.7"), Remote: netip.MustParseAddrPort("10.99.0.7:4242")},
	}
	if got := relaysShort(self, tunnels, []netip.Addr{c1, c2}); !slices.Equal(got, []netip.Addr{w2, w4}) {
		t.Fatalf("relaysShort = %v, want [%v %v]", got, w2, w4)
	}
	if got := relaysShort(self, tunnels, []netip.Addr{c1, w4}); !slices.Equal(got, []netip.Addr{w2, w3}) {
		t.Fatalf("relaysShort with relays c1 and w4 = %v, want [%v %v] (w4 is not asked to relay to itself)", got, w2, w3)
	}
}
