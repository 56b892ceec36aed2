package control

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
)

// TestReissueWithinTheSecond: a route approved in the second a worker's
// certificate was signed in is in a new certificate at the next renewal
// pass, with no warning. On dc43d36 the reissue expired on the same whole
// second as the current one, raft refused it ("expires no later than the
// current one") and the exit node waited 30 s for the next pass
// (e2e.TestExitNode failed 1 run in 6).
func TestReissueWithinTheSecond(t *testing.T) {
	c, origin := newCluster(t)
	_, w1 := c.worker(t, origin, "w1")
	ctx := within(t, 10*time.Second)
	if err := w1.Call(ctx, origin.addr, PathSelfRoutes, false, SelfRoutesRequest{Prefixes: []netip.Prefix{state.ExitPrefix}}, nil); err != nil {
		t.Fatalf("w1 asks to be an exit node: %v", err)
	}
	if err := origin.p.ApproveRoute(ctx, apitype.RouteRequest{Node: "w1", Prefix: state.ExitPrefix.String()}, "uid=0@origin"); err != nil {
		t.Fatalf("approve: %v", err)
	}
	before, ok := origin.p.Raft().FSM().NodeByName("w1")
	if !ok {
		t.Fatal("no record of w1")
	}
	origin.p.now = func() time.Time { return before.NebulaIssued } // the same instant: the same whole second
	origin.p.RenewNebulaCerts(ctx)
	after, _ := origin.p.Raft().FSM().NodeByName("w1")
	if w := origin.logs.warnings(); len(w) != 0 {
		t.Fatalf("the reissue logged warnings: %v", w)
	}
	if !slices.Equal(after.NebulaRoutes, []netip.Prefix{state.ExitPrefix}) || after.NebulaFingerprint == before.NebulaFingerprint {
		t.Fatalf("not reissued with the exit route: routes %v, fingerprint unchanged %t", after.NebulaRoutes,
			after.NebulaFingerprint == before.NebulaFingerprint)
	}
	if !after.NebulaExpires.After(before.NebulaExpires) || after.NebulaExpires.Sub(before.NebulaExpires) > 2*time.Second {
		t.Fatalf("expires %s, want a second or two after the current %s", after.NebulaExpires, before.NebulaExpires)
	}
}
