package member

import (
	"net/netip"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/netcheck"
	"github.com/meshd/meshd/pki"
)

// TestNoDirectFromTags: the rule pathup asks, from this node's own path
// check and the peer's gossip tag: no direct path only when both nodes
// are behind a NAT and one of the NATs is symmetric; a side not known (no
// tag, a garbled one, a check that could not tell) or not behind a NAT
// leaves the pair to be tried. The peer is found by the address it
// gossips from, not the overlay address its tags claim.
func TestNoDirectFromTags(t *testing.T) {
	peer := netip.MustParseAddr("10.42.0.7")
	member := func(tags map[string]string) []gossip.Member {
		return []gossip.Member{
			{Name: "liar", Addr: netip.MustParseAddrPort("10.42.0.9:7946"), Tags: map[string]string{tagOverlay: "10.42.0.7", tagNAT: "open"}},
			{Name: "w2", Addr: netip.AddrPortFrom(peer, 7946), Tags: tags},
		}
	}
	for _, tc := range []struct {
		own  *netcheck.Report
		tags map[string]string
		want bool
	}{
		{report(true, true, netcheck.MappingSymmetric), map[string]string{tagNAT: "sym"}, true},
		{report(true, true, netcheck.MappingSymmetric), map[string]string{tagNAT: "pp"}, true},
		{report(true, true, netcheck.MappingPortPreserving), map[string]string{tagNAT: "sym"}, true},
		{report(true, true, netcheck.MappingEndpointIndependent), map[string]string{tagNAT: "sym"}, true},
		{report(true, true, netcheck.MappingPortPreserving), map[string]string{tagNAT: "pp"}, false},
		{report(true, true, netcheck.MappingEndpointIndependent), map[string]string{tagNAT: "ei"}, false},
		{report(true, false, netcheck.MappingPortPreserving), map[string]string{tagNAT: "sym"}, false}, // this node has no NAT
		{report(true, true, netcheck.MappingSymmetric), map[string]string{tagNAT: "open"}, false},      // the peer has none
		{report(true, true, netcheck.MappingSymmetric), map[string]string{tagNAT: "unk"}, false},
		{report(true, true, netcheck.MappingSymmetric), map[string]string{}, false},                     // an older release
		{report(true, true, netcheck.MappingSymmetric), map[string]string{tagNAT: "symmetric!"}, false}, // garbled
		{report(true, true, netcheck.MappingUnknown), map[string]string{tagNAT: "sym"}, false},          // one control node answered
		{report(false, false, netcheck.MappingUnknown), map[string]string{tagNAT: "sym"}, false},        // UDP blocked
		{nil, map[string]string{tagNAT: "sym"}, false},                                                  // the check could not run
	} {
		own := NATOf(tc.own)
		reason, got := noDirect(own, peerNAT(member(tc.tags), peer))
		if got != tc.want || (got && reason == "") {
			t.Errorf("own %s, peer tags %v: noDirect %t (%q), want %t", own, tc.tags, got, reason, tc.want)
		}
	}
	if c := peerNAT(member(map[string]string{tagNAT: "sym"}), netip.MustParseAddr("10.42.0.8")); c != natUnknown {
		t.Errorf("a member not in gossip reads %s, want %s", c, natUnknown)
	}
}

func report(udp, nat bool, m netcheck.Mapping) *netcheck.Report {
	return &netcheck.Report{UDP: udp, NAT: nat, Mapping: m}
}

// TestNATStateKeepsItsLastAnswer: the runtime's NAT reads unknown until a
// check told it, and says when it changed (logged once, not every check).
func TestNATStateKeepsItsLastAnswer(t *testing.T) {
	var s natState
	if s.get() != natUnknown {
		t.Fatalf("before any check: %s", s.get())
	}
	if !s.set(natSymmetric) || s.set(natSymmetric) || s.get() != natSymmetric {
		t.Fatalf("set reports no change, or a change twice: %s", s.get())
	}
}

// TestNoNATOffersNoRelays: a node whose path check found no NAT in front
// of it offers no relays (its peers reach it directly, and Nebula asks
// every relay a target offers at each handshake attempt); behind a NAT,
// or before any check could tell, it offers every control node.
func TestNoNATOffersNoRelays(t *testing.T) {
	ctl := control.NodeRecord{Node: apitype.Node{ID: "id-c1", Name: "c1", Role: string(pki.RoleControl),
		State: string(state.NodeActive), OverlayIP: "10.42.0.1", Underlay: "192.0.2.1"}, NebulaPort: 4242}
	f := &listFacts{list: []control.NodeRecord{ctl}}
	for _, tc := range []struct {
		nat  NAT
		want int
	}{
		{"", 1}, {natUnknown, 1}, {natSymmetric, 1}, {natPreserve, 1}, {natOpen, 0},
	} {
		nd := &node{cluster: f, facts: &statedir.Facts{NodeID: "id-w1", Name: "w1", Overlay: netip.MustParsePrefix("10.42.0.5/16")}}
		nd.nat.set(tc.nat)
		in := nd.overlayInputs()
		if got := len(desired.Compute(in).Relays); got != tc.want || in.SelfNoNAT != (tc.nat == natOpen) {
			t.Errorf("NAT %q: %d relays offered (SelfNoNAT %v), want %d", tc.nat, got, in.SelfNoNAT, tc.want)
		}
	}
	if got := NATOf(report(true, false, "")); got != natOpen {
		t.Errorf("a join's check that saw no NAT reads as %q, want %q", got, natOpen)
	}
}

// listFacts serves a fixed node list and no revocations.
type listFacts struct {
	clusterFacts // nil: only the methods below are called
	list         []control.NodeRecord
}

func (f *listFacts) Records() ([]control.NodeRecord, bool) { return f.list, true }
func (f *listFacts) Revocations() control.Revocations      { return control.Revocations{} }
func (f *listFacts) Record(id string) (control.NodeRecord, bool) {
	return findRecord(f.list, id)
}
func (f *listFacts) Seeds() []string { return nil }
