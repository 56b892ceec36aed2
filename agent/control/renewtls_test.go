package control

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestRenewTLSCerts: with a 30 s TLS lifetime, the CA holder leaves a
// fresh leaf alone, renews a due one for the recorded key (the record's
// current leaf becomes the previous one), a node without the CA renews
// nothing, and the node fetches its renewed leaf over mTLS (from a
// follower too) and would adopt it: it certifies the node's own key and
// chains to the cluster CA.
func TestRenewTLSCerts(t *testing.T) {
	c, origin := newCluster(t)
	origin.p.cfg.TLSLifetime = 30 * time.Second
	c2 := c.joinControl(t, origin, "c2")
	c2.p.cfg.TLSLifetime = 30 * time.Second
	wkeys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	wID := c.admit(t, origin, "w1", pki.RoleWorker, wkeys, enroll.Ports{})
	ctx := within(t, 20*time.Second)
	before, _ := origin.p.Raft().FSM().Node(wID)
	issued, expires, err := LeafValidity(before.TLSCert)
	if err != nil {
		t.Fatal(err)
	}
	if got := expires.Sub(issued); got < 29*time.Second || got > 31*time.Second {
		t.Fatalf("admission leaf lives %s; want the configured 30s", got)
	}

	soon := issued.Add(10 * time.Second)
	origin.p.now = func() time.Time { return soon }
	next := origin.p.RenewTLSCerts(ctx)
	if n, _ := origin.p.Raft().FSM().Node(wID); n.TLSFingerprint != before.TLSFingerprint {
		t.Fatal("a fresh leaf was renewed")
	}
	if from, to := issued.Add(20*time.Second), issued.Add(22500*time.Millisecond); next.Before(from) || next.After(to) {
		t.Fatalf("next renewal due %s, want within [%s, %s] (2/3 to 3/4 of the lifetime)", next, from, to)
	}

	later := issued.Add(23 * time.Second) // past 3/4 of 30 s
	c2.p.now = func() time.Time { return later }
	if next := c2.p.RenewTLSCerts(ctx); !next.IsZero() {
		t.Fatalf("a node without the CA scheduled a renewal at %s", next)
	}
	if n, _ := origin.p.Raft().FSM().Node(wID); n.TLSFingerprint != before.TLSFingerprint {
		t.Fatal("a node without the CA renewed a leaf")
	}
	origin.p.now = func() time.Time { return later }
	origin.p.RenewTLSCerts(ctx)
	after, _ := origin.p.Raft().FSM().Node(wID)
	if after.TLSFingerprint == before.TLSFingerprint || after.PrevTLSFingerprint != before.TLSFingerprint ||
		!after.TLSExpires.After(before.TLSExpires) || len(after.Retired) != 0 {
		t.Fatalf("not renewed: before %s/%s, after %s (prev %s) %s retired %v", before.TLSFingerprint, before.TLSExpires,
			after.TLSFingerprint, after.PrevTLSFingerprint, after.TLSExpires, after.Retired)
	}
	if ev := origin.logs.withCode(codes.EventTLSRenewed); len(ev) == 0 || !slices.ContainsFunc(ev, func(r logRecord) bool {
		return r.attrs["node"].String() == "w1"
	}) {
		t.Fatalf("renewal events %v; want one for w1", ev)
	}

	// The worker fetches its renewed leaf with the leaf it holds.
	wid := &pki.Identity{CACert: c.ca.CertPEM(), Cert: before.TLSCert, Key: wkeys.TLSKeyPEM}
	wc, err := NewClient(wid)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.CloseIdle()
	waitFor(t, 5*time.Second, "c2 applies the renewal", func() bool {
		n, _ := c2.p.Raft().FSM().Node(wID)
		return n.TLSFingerprint == after.TLSFingerprint
	})
	var got TLSCertResponse
	if err := wc.AskSeeds(ctx, []string{c2.addr}, PathTLSCert, &got); err != nil {
		t.Fatalf("fetch renewed leaf: %v", err)
	}
	if !bytes.Equal(got.Cert, after.TLSCert) {
		t.Fatal("served a leaf other than the recorded one")
	}
	if _, err := pki.CheckRenewedLeaf(wid, got.Cert, time.Now()); err != nil {
		t.Fatalf("the worker would refuse its renewed leaf: %v", err)
	}
	// A control node reads its own record.
	origin.p.RenewTLSCerts(ctx) // nothing due now: w1 and c2 fresh or not yet due
	if own := c2.p.OwnTLSCert(); len(own) == 0 {
		t.Fatal("c2 has no leaf on record")
	}
	if w := origin.logs.warnings(); len(w) != 0 {
		t.Fatalf("a clean renewal logged warnings: %v", w)
	}
}

// TestRenewTLSSkipsInactive: a removed node's leaf is never renewed.
func TestRenewTLSSkipsInactive(t *testing.T) {
	c, origin := newCluster(t)
	origin.p.cfg.TLSLifetime = 30 * time.Second
	wID := c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	ctx := within(t, 20*time.Second)
	if err := origin.p.Remove(ctx, "w1", "test"); err != nil {
		t.Fatal(err)
	}
	before, _ := origin.p.Raft().FSM().Node(wID)
	later := time.Now().Add(25 * time.Second)
	origin.p.now = func() time.Time { return later }
	origin.p.RenewTLSCerts(ctx)
	if n, _ := origin.p.Raft().FSM().Node(wID); n.TLSFingerprint != before.TLSFingerprint || n.State != state.NodeRemoved {
		t.Fatalf("removed node's leaf renewed: %+v", n)
	}
}
