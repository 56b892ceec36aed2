package member

import (
	"net/netip"
	"slices"
	"testing"
	"time"

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

// TestShortWatch: a tunnel short of relays is rebuilt only once it has
// been seen short at every look for relayShortSettle (one that has just
// finished its handshake adds relays one answer at a time), once per
// relay list; a look that does not name it starts its wait again. Each
// look says when the next one is due though nothing changes: the first
// settle to end, none when nothing settles (runRelayDown then sleeps
// until a change, issue 54).
func TestShortWatch(t *testing.T) {
	w := shortWatch{rebuiltFor: map[netip.Addr]string{}, since: map[netip.Addr]time.Time{}}
	a, b := netip.MustParseAddr("10.42.0.4"), netip.MustParseAddr("10.42.0.5")
	t0 := time.Unix(1000, 0)
	const none = -1
	step := func(at time.Duration, short []netip.Addr, key string, next time.Duration, want ...netip.Addr) {
		t.Helper()
		got, gotNext := w.due(t0.Add(at), short, key)
		if !slices.Equal(got, want) {
			t.Fatalf("at %s, short %v, list %s: due %v, want %v", at, short, key, got, want)
		}
		if wantNext := t0.Add(next); (next == none) != gotNext.IsZero() || (next != none && !gotNext.Equal(wantNext)) {
			t.Fatalf("at %s, short %v, list %s: next look at %v, want %v (none: %d)", at, short, key, gotNext, wantNext, next)
		}
	}
	step(0, []netip.Addr{a, b}, "L1", relayShortSettle)
	step(time.Second, []netip.Addr{a}, "L1", relayShortSettle)                       // b not short any more: its wait ends
	step(relayShortSettle, []netip.Addr{a, b}, "L1", 2*relayShortSettle, a)          // a settled; b starts again
	step(relayShortSettle+time.Second, []netip.Addr{a, b}, "L1", 2*relayShortSettle) // a done for L1
	step(2*relayShortSettle, []netip.Addr{a, b}, "L1", none, b)
	step(3*relayShortSettle, []netip.Addr{a, b}, "L2", 4*relayShortSettle) // a new list: each waits again
	step(4*relayShortSettle, []netip.Addr{a, b}, "L2", none, a, b)
}
