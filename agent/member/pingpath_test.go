package member

import (
	"net/netip"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/mesh"
)

// TestPathOf: a tunnel with an underlay remote is direct to it; a relayed
// one (no remote; meshd configures no relays yet, issue 29, so this is
// the only test of the branch) names its first relay by the record that
// holds the relay's overlay address, an active record before a former
// node's, the address itself when no record holds it; a tunnel with
// neither has no path.
func TestPathOf(t *testing.T) {
	ip := netip.MustParseAddr
	rec := func(name, ovl, st string) control.NodeRecord {
		return control.NodeRecord{Node: apitype.Node{Name: name, OverlayIP: ovl, State: st}}
	}
	records := []control.NodeRecord{
		rec("gone", "10.42.0.9", "removed"), // its address now c2's: the active record names it
		rec("c1", "10.42.0.1", "active"),
		rec("c2", "10.42.0.9", "active"),
		rec("left", "10.42.0.7", "left"),
		rec("bad", "not-an-ip", "active"),
	}
	for _, tc := range []struct {
		name string
		tn   mesh.Tunnel
		want *apitype.PingPath
		text string
	}{
		{"direct", mesh.Tunnel{OverlayIP: ip("10.42.0.3"), Remote: netip.MustParseAddrPort("192.0.2.3:4242")},
			&apitype.PingPath{Direct: "192.0.2.3:4242"}, "direct 192.0.2.3:4242"},
		{"direct/ipv6", mesh.Tunnel{OverlayIP: ip("10.42.0.3"), Remote: netip.MustParseAddrPort("[2001:db8::3]:4242")},
			&apitype.PingPath{Direct: "[2001:db8::3]:4242"}, "direct [2001:db8::3]:4242"},
		{"relayed/named", mesh.Tunnel{OverlayIP: ip("10.42.0.3"), Relayed: true, Relays: []netip.Addr{ip("10.42.0.1")}},
			&apitype.PingPath{Relay: "c1", RelayIP: "10.42.0.1"}, "relayed via c1"},
		{"relayed/first-relay", mesh.Tunnel{OverlayIP: ip("10.42.0.3"), Relayed: true, Relays: []netip.Addr{ip("10.42.0.9"), ip("10.42.0.1")}},
			&apitype.PingPath{Relay: "c2", RelayIP: "10.42.0.9"}, "relayed via c2"},
		{"relayed/former-node", mesh.Tunnel{OverlayIP: ip("10.42.0.3"), Relayed: true, Relays: []netip.Addr{ip("10.42.0.7")}},
			&apitype.PingPath{Relay: "left", RelayIP: "10.42.0.7"}, "relayed via left"},
		{"relayed/unknown", mesh.Tunnel{OverlayIP: ip("10.42.0.3"), Relayed: true, Relays: []netip.Addr{ip("10.42.0.200")}},
			&apitype.PingPath{Relay: "10.42.0.200", RelayIP: "10.42.0.200"}, "relayed via 10.42.0.200"},
		{"none", mesh.Tunnel{OverlayIP: ip("10.42.0.3")}, nil, ""},
		{"none/relayed-without-relays", mesh.Tunnel{OverlayIP: ip("10.42.0.3"), Relayed: true}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pathOf(tc.tn, records)
			switch {
			case (got == nil) != (tc.want == nil):
				t.Fatalf("pathOf = %+v, want %+v", got, tc.want)
			case got == nil:
				return
			case *got != *tc.want:
				t.Errorf("pathOf = %+v, want %+v", *got, *tc.want)
			}
			if s := got.String(); s != tc.text {
				t.Errorf("printed %q, want %q", s, tc.text)
			}
		})
	}
}
