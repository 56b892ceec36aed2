package desired

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

func ip(s string) netip.Addr     { return netip.MustParseAddr(s) }
func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
func lh(o, u string) mesh.Lighthouse {
	return mesh.Lighthouse{OverlayIP: ip(o), Underlay: []netip.AddrPort{ap(u)}}
}

// A control node's view: itself (c1), another control node c2 and a
// worker w1, all recorded in raft and alive in gossip.
func base() Inputs {
	return Inputs{
		SelfName: "c1", SelfOverlay: ip("10.42.0.1"),
		Records: []Record{
			{ID: "id-c1", Name: "c1", Role: pki.RoleControl, Overlay: ip("10.42.0.1"), Underlay: ap("192.0.2.1:4242")},
			{ID: "id-c2", Name: "c2", Role: pki.RoleControl, Overlay: ip("10.42.0.2"), Underlay: ap("192.0.2.2:4242")},
			{ID: "id-w1", Name: "w1", Role: pki.RoleWorker, Overlay: ip("10.42.0.3"), Underlay: ap("192.0.2.3:4242")},
		},
		Members: []Member{
			{ID: "id-c1", Name: "c1", Role: pki.RoleControl, Overlay: ip("10.42.0.1"), Underlay: ap("192.0.2.1:4242"), Status: gossip.StatusAlive},
			{ID: "id-c2", Name: "c2", Role: pki.RoleControl, Overlay: ip("10.42.0.2"), Underlay: ap("192.0.2.2:4242"), Status: gossip.StatusAlive},
			{ID: "id-w1", Name: "w1", Role: pki.RoleWorker, Overlay: ip("10.42.0.3"), Underlay: ap("192.0.2.3:4242"), Status: gossip.StatusAlive},
		},
		Blocklist: []string{"fp-old"},
	}
}

func TestCompute(t *testing.T) {
	for _, tc := range []struct {
		name            string
		change          func(*Inputs)
		wantLighthouses []mesh.Lighthouse
		wantHosts       map[netip.Addr][]netip.AddrPort
	}{
		{
			name:            "steady state: the other control node leads the way, the worker is a static host",
			change:          func(*Inputs) {},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name: "a new node: recorded in raft, not yet seen by gossip, is reachable at once",
			change: func(in *Inputs) {
				in.Records = append(in.Records, Record{ID: "id-w2", Name: "w2", Role: pki.RoleWorker,
					Overlay: ip("10.42.0.4"), Underlay: ap("192.0.2.4:4242")})
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts: map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")},
				ip("10.42.0.4"): {ap("192.0.2.4:4242")}},
		},
		{
			name: "a removed node: gone from raft's active records and on the gone list, withdrawn though gossip still lists it",
			change: func(in *Inputs) {
				in.Records = in.Records[:2]
				in.Gone = []string{"id-w1"}
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{},
		},
		{
			name:            "a control node that is down (failed) stays a lighthouse: Nebula itself finds it again",
			change:          func(in *Inputs) { in.Members[1].Status = gossip.StatusFailed },
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name:            "a worker that failed is withdrawn until it is back",
			change:          func(in *Inputs) { in.Members[2].Status = gossip.StatusFailed },
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{},
		},
		{
			name:            "a control node that left gossip is no lighthouse",
			change:          func(in *Inputs) { in.Members[1].Status = gossip.StatusLeft },
			wantLighthouses: nil,
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			// Today's behaviour, which "Trust after join" changes: a gossip
			// member's tags replace its raft record, role included.
			name: "a gossip member whose tags disagree with its record: the tags win (role and underlay)",
			change: func(in *Inputs) {
				in.Members[2].Role = pki.RoleControl
				in.Members[2].Underlay = ap("198.51.100.9:4242")
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242"), lh("10.42.0.3", "198.51.100.9:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{},
		},
		{
			name: "a worker (no raft records): lighthouses from the join response, then gossip",
			change: func(in *Inputs) {
				in.SelfName, in.SelfOverlay = "w1", ip("10.42.0.3")
				in.Records = nil
				in.Lighthouses = []Lighthouse{{Overlay: ip("10.42.0.1"), Underlay: ap("192.0.2.1:4242")},
					{Overlay: ip("10.42.0.9"), Underlay: ap("192.0.2.9:4242")}}
				in.Members = in.Members[:2]
			},
			// 10.42.0.1 and .2 from gossip (c1 replaces the join response's
			// entry for its overlay IP); .9 only from the join response.
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.1", "192.0.2.1:4242"), lh("10.42.0.2", "192.0.2.2:4242"),
				lh("10.42.0.9", "192.0.2.9:4242")},
			wantHosts: map[netip.Addr][]netip.AddrPort{},
		},
		{
			name: "a member whose tags do not parse, and a lighthouse without an address, are ignored",
			change: func(in *Inputs) {
				in.Records = in.Records[:1]
				in.Members[2].Overlay = netip.Addr{}
				in.Members[1].Underlay = netip.AddrPort{}
				in.Lighthouses = []Lighthouse{{Overlay: ip("10.42.0.7")}}
			},
			wantLighthouses: nil,
			wantHosts:       map[netip.Addr][]netip.AddrPort{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.change(&in)
			got := Compute(in)
			if !reflect.DeepEqual(got.Lighthouses, tc.wantLighthouses) {
				t.Errorf("lighthouses %v, want %v", got.Lighthouses, tc.wantLighthouses)
			}
			if !reflect.DeepEqual(got.StaticHosts, tc.wantHosts) {
				t.Errorf("static hosts %v, want %v", got.StaticHosts, tc.wantHosts)
			}
			if !reflect.DeepEqual(got.Blocklist, in.Blocklist) {
				t.Errorf("blocklist %v, want %v", got.Blocklist, in.Blocklist)
			}
		})
	}
}

// TestComputeDoesNotAliasInputs: the blocklist is a copy.
func TestComputeDoesNotAliasInputs(t *testing.T) {
	in := base()
	got := Compute(in)
	got.Blocklist[0] = "changed"
	if in.Blocklist[0] != "fp-old" {
		t.Fatal("Compute's blocklist aliases its input")
	}
}

func TestAliveLighthouse(t *testing.T) {
	in := base()
	in.SelfName = "w1"
	if got, ok := AliveLighthouse(Peers(in)); !ok || got != ip("10.42.0.1") {
		t.Fatalf("alive lighthouse %v %v, want the lowest alive control node 10.42.0.1", got, ok)
	}
	in.Members[0].Status = gossip.StatusFailed
	if got, ok := AliveLighthouse(Peers(in)); !ok || got != ip("10.42.0.2") {
		t.Fatalf("alive lighthouse %v %v, want 10.42.0.2 once 10.42.0.1 failed", got, ok)
	}
	in.Members[1].Status = gossip.StatusSuspect
	in.Records = nil
	if got, ok := AliveLighthouse(Peers(in)); ok {
		t.Fatalf("alive lighthouse %v with none alive", got)
	}
}
