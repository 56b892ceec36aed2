package member

import (
	"net/netip"
	"testing"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/netcheck"
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
		own := classify(tc.own)
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
