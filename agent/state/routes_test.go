package state

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// activeWorker admits and confirms a worker.
func activeWorker(t *testing.T, f *FSM, seed byte, name string) string {
	t.Helper()
	id := "n-" + name
	mustApply(t, f, MintToken{Record: tokenRecord(seed, name, pki.RoleWorker)})
	mustApply(t, f, joinCmd(seed, id, name, pki.RoleWorker))
	mustApply(t, f, joiningCertsCmd(id))
	mustApply(t, f, ConfirmJoin{NodeID: id, At: t0.Add(2 * time.Minute)})
	return id
}

// carrier names the node carrying p in f ("" for none), failing the test
// when two do.
func carrier(t *testing.T, f *FSM, p netip.Prefix) string {
	t.Helper()
	var out []string
	for _, n := range f.Nodes() {
		for _, r := range n.Routes {
			if r.Prefix == p && r.Carrier {
				out = append(out, n.ID)
			}
		}
	}
	if len(out) > 1 {
		t.Fatalf("%s has %d carriers: %v", p, len(out), out)
	}
	if len(out) == 0 {
		return ""
	}
	return out[0]
}

// TestCarrierFollowsApprovalAndState: the router approved first carries
// a prefix; a second approval stands by; removing, withdrawing or
// narrowing the carrier moves it to the other; a move asked on a stale
// view is refused; the carrier moves only when it must (no flap back
// when the first router's approval returns).
func TestCarrierFollowsApprovalAndState(t *testing.T) {
	f := bootstrapped(t)
	r1, r2 := activeWorker(t, f, 1, "r1"), activeWorker(t, f, 2, "r2")
	at := t0.Add(time.Hour)
	for _, id := range []string{r1, r2} {
		mustApply(t, f, AdvertiseRoutes{NodeID: id, Prefixes: []netip.Prefix{lan50}, At: at})
	}
	if got := carrier(t, f, lan50); got != "" {
		t.Fatalf("an unapproved prefix is carried by %s", got)
	}
	mustApply(t, f, ApproveRoute{NodeID: r2, Prefix: lan50, At: at.Add(time.Second), Actor: "uid=0@origin"})
	mustApply(t, f, ApproveRoute{NodeID: r1, Prefix: lan50, At: at.Add(2 * time.Second)})
	if got := carrier(t, f, lan50); got != r2 {
		t.Fatalf("carrier %q, want %s (approved first)", got, r2)
	}
	if err := apply(t, f, SetCarrier{Prefix: lan50, NodeID: r1, From: r1, At: at}); codes.Of(err) != codes.CarrierChanged {
		t.Errorf("a move from a carrier that is not one: %v, want %s", err, codes.CarrierChanged)
	}
	mustApply(t, f, WithdrawRoute{NodeID: r2, Prefix: lan50, At: at.Add(3 * time.Second)})
	if got := carrier(t, f, lan50); got != r1 {
		t.Fatalf("after withdrawing r2: carrier %q, want %s", got, r1)
	}
	mustApply(t, f, ApproveRoute{NodeID: r2, Prefix: lan50, At: at.Add(4 * time.Second)})
	if got := carrier(t, f, lan50); got != r1 {
		t.Fatalf("r2 approved again took the prefix back (%q): a carrier moves only when it must", got)
	}
	mustApply(t, f, SetNodeState{NodeID: r1, State: NodeRemoved, At: at.Add(5 * time.Second)})
	if got := carrier(t, f, lan50); got != r2 {
		t.Fatalf("after removing r1: carrier %q, want %s", got, r2)
	}
	mustApply(t, f, AdvertiseRoutes{NodeID: r2, Prefixes: nil, At: at.Add(6 * time.Second)})
	if got := carrier(t, f, lan50); got != "" {
		t.Fatalf("nobody asks for %s any more, yet %s carries it", lan50, got)
	}
	if err := apply(t, f, AdvertiseRoutes{NodeID: r1, Prefixes: []netip.Prefix{lan50}, At: at}); codes.Of(err) != codes.RouteBad {
		t.Errorf("a removed node's request: %v, want %s", err, codes.RouteBad)
	}
}

// TestRouteRequestRefusals: each bad request is refused with its code and
// changes nothing.
func TestRouteRequestRefusals(t *testing.T) {
	f := bootstrapped(t)
	r1, r2 := activeWorker(t, f, 1, "r1"), activeWorker(t, f, 2, "r2")
	mustApply(t, f, AdvertiseRoutes{NodeID: r1, Prefixes: []netip.Prefix{lan50}, At: t0})
	before := f.snapshot()
	for _, c := range []struct {
		name string
		p    []string
		want codes.Code
	}{
		{"host bits", []string{"192.168.60.1/24"}, codes.RouteBad},
		{"IPv6", []string{"fd00::/64"}, codes.RouteBad},
		{"covers the overlay", []string{"10.0.0.0/8"}, codes.RouteBad},
		{"inside the overlay", []string{"10.42.3.0/24"}, codes.RouteBad},
		{"overlap in the request", []string{"172.16.0.0/16", "172.16.4.0/24"}, codes.RouteBad},
		{"twice", []string{"172.16.0.0/16", "172.16.0.0/16"}, codes.RouteBad},
		{"overlaps r1's", []string{"192.168.0.0/16"}, codes.RouteOverlap},
		{"holds the origin's underlay", []string{"192.0.2.0/24"}, codes.RouteUnderlay},
		{"loopback", []string{"127.0.0.0/8"}, codes.RouteBad},
	} {
		var ps []netip.Prefix
		for _, s := range c.p {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		if err := apply(t, f, AdvertiseRoutes{NodeID: r2, Prefixes: ps, At: t0}); codes.Of(err) != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	if err := apply(t, f, ApproveRoute{NodeID: r2, Prefix: lan50, At: t0}); codes.Of(err) != codes.RouteNotRequested {
		t.Errorf("approving what was not asked: %v, want %s", err, codes.RouteNotRequested)
	}
	after := f.snapshot()
	if !slices.Equal(before.Nodes[r2].Routes, after.Nodes[r2].Routes) || len(after.Nodes[r2].Routes) != 0 {
		t.Errorf("refused requests changed r2's routes to %v", after.Nodes[r2].Routes)
	}
	// The same prefix as r1 is failover, not an overlap; the exit route
	// overlaps everything and is taken.
	mustApply(t, f, AdvertiseRoutes{NodeID: r2, Prefixes: []netip.Prefix{lan50, ExitPrefix}, At: t0})
}

// TestWithdrawnRouteRevokesItsCertificates: a renewal that drops a prefix
// revokes every certificate of the node that held one (not the new one);
// a renewal that keeps them revokes nothing.
func TestWithdrawnRouteRevokesItsCertificates(t *testing.T) {
	f := bootstrapped(t)
	r1 := activeWorker(t, f, 1, "r1")
	mustApply(t, f, AdvertiseRoutes{NodeID: r1, Prefixes: []netip.Prefix{lan50}, At: t0})
	mustApply(t, f, ApproveRoute{NodeID: r1, Prefix: lan50, At: t0})
	renew := func(fp string, days int, routes ...netip.Prefix) {
		mustApply(t, f, RenewNebula{NodeID: r1, Cert: []byte(fp), Fingerprint: fp, Routes: routes,
			Issued: t0, Expires: t0.Add(time.Duration(days) * 24 * time.Hour), At: t0})
	}
	renew("fp-a", 400, lan50)
	renew("fp-b", 401, lan50)
	revoked := func() []string {
		var out []string
		for _, r := range f.snapshot().Revocations {
			if r.NodeID == r1 {
				out = append(out, r.Fingerprint)
			}
		}
		return out
	}
	if got := revoked(); len(got) != 0 {
		t.Fatalf("renewals that keep the route revoked %v", got)
	}
	mustApply(t, f, WithdrawRoute{NodeID: r1, Prefix: lan50, At: t0})
	renew("fp-c", 402)
	got := revoked()
	slices.Sort(got)
	if !slices.Equal(got, []string{"fp-a", "fp-b"}) {
		t.Errorf("revoked %v after the route was dropped, want [fp-a fp-b]", got)
	}
	if n, _ := f.Node(r1); len(n.NebulaRoutes) != 0 || len(n.NebulaRouted) != 0 {
		t.Errorf("after the renewal without routes: NebulaRoutes %v, NebulaRouted %v", n.NebulaRoutes, n.NebulaRouted)
	}
}
