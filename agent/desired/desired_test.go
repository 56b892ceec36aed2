package desired

import (
	"net/netip"
	"reflect"
	"strings"
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
			{ID: "id-c1", Name: "c1", Role: pki.RoleControl, Overlay: ip("10.42.0.1"), Addr: ip("10.42.0.1"), Status: gossip.StatusAlive},
			{ID: "id-c2", Name: "c2", Role: pki.RoleControl, Overlay: ip("10.42.0.2"), Addr: ip("10.42.0.2"), Status: gossip.StatusAlive},
			{ID: "id-w1", Name: "w1", Role: pki.RoleWorker, Overlay: ip("10.42.0.3"), Addr: ip("10.42.0.3"), Status: gossip.StatusAlive},
		},
		RecordsKnown: true,
		Blocklist:    []string{"fp-old"},
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
			name:            "a worker gossip lost stays a static host: only raft withdraws (issue 27)",
			change:          func(in *Inputs) { in.Members[2].Status = gossip.StatusFailed },
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name: "a live node made to look left by gossip (a forged leave or dead message) stays: raft has it active",
			change: func(in *Inputs) {
				in.Members[1].Status = gossip.StatusLeft
				in.Members[2].Status = gossip.StatusLeft
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name: "records win: a member whose tags disagree with its record (role, underlay) contributes nothing",
			change: func(in *Inputs) {
				in.Members[2].Role = pki.RoleControl
				in.Members[2].Status = gossip.StatusFailed // ignored too: the record alone stands
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name: "forged member: no record, role=control tags, is no lighthouse and no peer",
			change: func(in *Inputs) {
				in.Members = append(in.Members, Member{ID: "id-evil", Name: "evil", Role: pki.RoleControl,
					Overlay: ip("10.42.0.66"), Addr: ip("10.42.0.66"), Status: gossip.StatusAlive})
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name: "forged member claiming a control node's overlay IP and name but another id: ignored",
			change: func(in *Inputs) {
				in.Members[1] = Member{ID: "id-evil", Name: "c2", Role: pki.RoleControl, Overlay: ip("10.42.0.2"),
					Addr: ip("198.51.100.66"), Status: gossip.StatusLeft}
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name: "a member with a record's id under another name: its status is ignored",
			change: func(in *Inputs) {
				in.Members[2].Name = "w1-impostor"
				in.Members[2].Status = gossip.StatusFailed
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{ip("10.42.0.3"): {ap("192.0.2.3:4242")}},
		},
		{
			name: "a worker before its first node list: lighthouses from the join response, gossip contributes nothing",
			change: func(in *Inputs) {
				in.SelfName, in.SelfOverlay = "w1", ip("10.42.0.3")
				in.Records, in.RecordsKnown = nil, false
				in.Lighthouses = []Lighthouse{{Overlay: ip("10.42.0.1"), Underlay: ap("192.0.2.1:4242")}}
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.1", "192.0.2.1:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{},
		},
		{
			name: "a worker with its node list drops join-response lighthouses that are no longer active control records",
			change: func(in *Inputs) {
				in.SelfName, in.SelfOverlay = "w1", ip("10.42.0.3")
				in.Records = in.Records[:2]
				in.Lighthouses = []Lighthouse{{Overlay: ip("10.42.0.1"), Underlay: ap("192.0.2.1:4242")},
					{Overlay: ip("10.42.0.9"), Underlay: ap("192.0.2.9:4242")}}
			},
			wantLighthouses: []mesh.Lighthouse{lh("10.42.0.1", "192.0.2.1:4242"), lh("10.42.0.2", "192.0.2.2:4242")},
			wantHosts:       map[netip.Addr][]netip.AddrPort{},
		},
		{
			name: "a member whose tags do not parse, and a lighthouse without an address, are ignored",
			change: func(in *Inputs) {
				in.Records = in.Records[:1]
				in.RecordsKnown = false
				in.Members[2].Overlay = netip.Addr{}
				in.Members[1].Addr = netip.Addr{}
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
			var wantRelays []netip.Addr // every lighthouse relays
			for _, l := range tc.wantLighthouses {
				wantRelays = append(wantRelays, l.OverlayIP)
			}
			if !reflect.DeepEqual(got.Relays, wantRelays) {
				t.Errorf("relays %v, want %v", got.Relays, wantRelays)
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
	if got := AliveLighthouses(Peers(in)); len(got) != 2 || got[0] != ip("10.42.0.1") || got[1] != ip("10.42.0.2") {
		t.Fatalf("alive lighthouses %v, want 10.42.0.1 then 10.42.0.2", got)
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

// TestUnmatched: every member Peers ignores is reported once, with why;
// matching members and this node are not.
func TestUnmatched(t *testing.T) {
	in := base()
	in.Members = append(in.Members,
		Member{ID: "id-evil", Name: "evil", Role: pki.RoleControl, Overlay: ip("10.42.0.66"), Status: gossip.StatusAlive})
	in.Members[2].Role = pki.RoleControl
	got := Unmatched(in)
	if len(got) != 2 || got[0].Name != "evil" || got[1].Name != "w1" {
		t.Fatalf("unmatched %+v, want evil (no record) and w1 (role tag)", got)
	}
	for _, g := range got {
		if g.Reason == "" {
			t.Errorf("%s: no reason", g.Name)
		}
	}
	if got := Unmatched(base()); len(got) != 0 {
		t.Fatalf("steady state: unmatched %+v", got)
	}
}

// TestPeersCountOnlyFromOverlay (issue 27): a member whose tags match its
// record in every way but which gossips from another address (a gossip
// key holder elsewhere speaking for a stopped node) lends no liveness, is
// no alive lighthouse, and is listed as unmatched with the address; from
// the recorded legacy address of a node an earlier release admitted, it
// counts.
func TestPeersCountOnlyFromOverlay(t *testing.T) {
	in := base()
	in.SelfName = "w1"
	in.Members[0].Addr = ip("198.51.100.66") // "c1" from elsewhere
	in.Members[1].Status = gossip.StatusFailed
	peers := Peers(in)
	if p := peers["c1"]; p.Gossip != "" {
		t.Errorf("c1 gossiping from 198.51.100.66 lends status %q", p.Gossip)
	}
	if got, ok := AliveLighthouse(peers); ok {
		t.Errorf("alive lighthouse %v from a member off its overlay address", got)
	}
	un := Unmatched(in)
	if len(un) != 1 || un[0].Name != "c1" || !strings.Contains(un[0].Reason, "198.51.100.66") {
		t.Errorf("unmatched %+v, want c1 with its gossip address", un)
	}
	if Counts(in, in.Members[0]) || !Counts(in, in.Members[1]) || !Counts(in, in.Members[2]) {
		t.Error("Counts disagrees with Peers")
	}
	in.Records[0].LegacyGossip = ip("198.51.100.66")
	if p := Peers(in)["c1"]; p.Gossip != gossip.StatusAlive {
		t.Errorf("c1 from its recorded legacy gossip address: status %q, want alive", p.Gossip)
	}
}

// TestComputeRelayVolunteer: a worker whose record offers it as a relay
// (`relay: true`) is in every node's relay list, after the control
// nodes, and stays a static host; without a usable underlay address, or
// without the offer, it is no relay; a former volunteer (no active
// record) is none either. A node with no NAT in front of it offers none
// at all (Inputs.SelfNoNAT): its peers reach it directly.
func TestComputeRelayVolunteer(t *testing.T) {
	vol := Record{ID: "id-w2", Name: "w2", Role: pki.RoleWorker, Overlay: ip("10.42.0.4"), Underlay: ap("192.0.2.4:4242"), Relay: true}
	for _, tc := range []struct {
		name   string
		change func(*Inputs)
		want   []netip.Addr
	}{
		{"volunteer on a control node's view", func(in *Inputs) { in.Records = append(in.Records, vol) },
			[]netip.Addr{ip("10.42.0.2"), ip("10.42.0.4")}},
		{"volunteer on another worker's view", func(in *Inputs) {
			in.SelfName, in.SelfOverlay = "w1", ip("10.42.0.3")
			in.Records = append(in.Records, vol)
		}, []netip.Addr{ip("10.42.0.1"), ip("10.42.0.2"), ip("10.42.0.4")}},
		{"the volunteer itself lists only the control nodes", func(in *Inputs) {
			in.SelfName, in.SelfOverlay = "w2", ip("10.42.0.4")
			in.Records = append(in.Records, vol)
		}, []netip.Addr{ip("10.42.0.1"), ip("10.42.0.2")}},
		{"no offer, no relay", func(in *Inputs) {
			v := vol
			v.Relay = false
			in.Records = append(in.Records, v)
		}, []netip.Addr{ip("10.42.0.2")}},
		{"an offer without an underlay address is no relay", func(in *Inputs) {
			v := vol
			v.Underlay = netip.AddrPort{}
			in.Records = append(in.Records, v)
		}, []netip.Addr{ip("10.42.0.2")}},
		{"a volunteer that is gone is no relay", func(in *Inputs) {
			in.Records = append(in.Records, vol)
			in.Gone = []string{"id-w2"}
		}, []netip.Addr{ip("10.42.0.2")}},
		{"a worker with no NAT in front of it offers no relay", func(in *Inputs) {
			in.SelfName, in.SelfOverlay = "w1", ip("10.42.0.3")
			in.Records = append(in.Records, vol)
			in.SelfNoNAT = true
		}, nil},
		{"nor does a control node with no NAT", func(in *Inputs) {
			in.Records = append(in.Records, vol)
			in.SelfNoNAT = true
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.change(&in)
			got := Compute(in)
			if !reflect.DeepEqual(got.Relays, tc.want) {
				t.Errorf("relays %v, want %v", got.Relays, tc.want)
			}
			for _, r := range in.Records {
				if r.Relay && r.Name != in.SelfName && r.Underlay.IsValid() && len(in.Gone) == 0 {
					if _, ok := got.StaticHosts[r.Overlay]; !ok {
						t.Errorf("volunteer %s is not a static host: %v", r.Name, got.StaticHosts)
					}
				}
			}
		})
	}
}

// TestComputeMapsIPv6Peers (issue 34): on a node whose own certificate is
// dual-stack, every peer's IPv6 overlay address inside its IPv6 overlay
// maps to the peer's underlay, a lighthouse's too; a node on a v1
// certificate (a cluster moving to v2) maps none, and an address outside
// its IPv6 overlay is left out.
func TestComputeMapsIPv6Peers(t *testing.T) {
	in := base()
	in.Records[1].Overlay6, in.Records[2].Overlay6 = ip("fd00:34::2"), ip("fd00:34::3")
	if got := Compute(in).StaticHosts; len(got) != 1 || got[ip("10.42.0.3")] == nil {
		t.Fatalf("a v1 node maps %v, want w1's IPv4 address only", got)
	}
	in.SelfOverlay6 = netip.MustParsePrefix("fd00:34::/64")
	want := map[netip.Addr][]netip.AddrPort{
		ip("10.42.0.3"):  {ap("192.0.2.3:4242")},
		ip("fd00:34::2"): {ap("192.0.2.2:4242")}, // the lighthouse c2, by its IPv6 address
		ip("fd00:34::3"): {ap("192.0.2.3:4242")},
	}
	if got := Compute(in).StaticHosts; !reflect.DeepEqual(got, want) {
		t.Fatalf("a dual-stack node maps %v, want %v", got, want)
	}
	in.Records[2].Overlay6 = ip("fd00:99::3")
	if got := Compute(in).StaticHosts; got[ip("fd00:99::3")] != nil {
		t.Fatalf("an IPv6 address outside the node's IPv6 overlay was mapped: %v", got)
	}
}
