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

// TestRenewPassesSkipUnchangedScans: a renewal pass scans every record
// only when raft's index moved or a certificate fell due since the last
// scan; otherwise it reads nothing but the index (issue 54: the TLS pass
// parsed every leaf every 30 s, the Nebula pass scanned every record on
// every raft change). A certificate that falls due is still renewed.
func TestRenewPassesSkipUnchangedScans(t *testing.T) {
	c, origin := newCluster(t)
	c.worker(t, origin, "w1")
	ctx := within(t, 10*time.Second)
	p := origin.p
	start := time.Now()
	p.now = func() time.Time { return start }
	p.RenewNebulaCerts(ctx)
	next := p.RenewTLSCerts(ctx)
	if next.IsZero() {
		t.Fatal("the TLS pass found no leaf that will fall due")
	}
	tlsScans, _ := p.tlsScan.counts()
	nebScans, _ := p.nebulaScan.counts()
	for range 5 {
		p.RenewNebulaCerts(ctx)
		if got := p.RenewTLSCerts(ctx); !got.Equal(next) {
			t.Fatalf("a skipped TLS pass says the next is due at %s, want %s", got, next)
		}
	}
	if s, k := p.tlsScan.counts(); s != tlsScans || k != 5 {
		t.Errorf("TLS passes with nothing changed: %d scans (want %d), %d skips (want 5)", s, tlsScans, k)
	}
	if s, k := p.nebulaScan.counts(); s != nebScans || k != 5 {
		t.Errorf("Nebula passes with nothing changed: %d scans (want %d), %d skips (want 5)", s, nebScans, k)
	}

	// A raft write (a token minted) moves the index: the next pass scans.
	mint(t, origin, "w2", "worker")
	p.RenewTLSCerts(ctx)
	if s, _ := p.tlsScan.counts(); s != tlsScans+1 {
		t.Errorf("after a write: %d TLS scans, want %d", s, tlsScans+1)
	}

	// Past the due instant a pass scans again and renews w1's leaf.
	before, _ := p.Raft().FSM().NodeByName("w1")
	p.now = func() time.Time { return next.Add(time.Minute) }
	p.RenewTLSCerts(ctx)
	after, _ := p.Raft().FSM().NodeByName("w1")
	if string(after.TLSCert) == string(before.TLSCert) {
		t.Error("a leaf past its renewal instant was not renewed")
	}
}
