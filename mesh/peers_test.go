package mesh

import (
	"net/netip"
	"slices"
	"testing"
)

// TestKnownPeers: the peers Tunnels and closeBlocked look up are every
// lighthouse, static host and relay a config ever named, sorted, once
// each; a later config without a node (removed) keeps it.
func TestKnownPeers(t *testing.T) {
	a, b, c, d := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.2"), netip.MustParseAddr("10.42.0.3"), netip.MustParseAddr("10.42.0.4")
	first := Config{
		Lighthouses: []Lighthouse{{OverlayIP: b}},
		StaticHosts: map[netip.Addr][]netip.AddrPort{c: nil, b: nil},
		Relays:      []netip.Addr{b, a},
	}
	k := knownPeers(nil, first)
	if want := []netip.Addr{a, b, c}; !slices.Equal(k, want) {
		t.Fatalf("knownPeers = %v, want %v", k, want)
	}
	k = knownPeers(k, Config{StaticHosts: map[netip.Addr][]netip.AddrPort{d: nil}}) // c removed, d joined
	if want := []netip.Addr{a, b, c, d}; !slices.Equal(k, want) {
		t.Fatalf("after a reload without c: %v, want %v", k, want)
	}
}
