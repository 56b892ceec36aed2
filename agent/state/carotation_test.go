package state

import (
	"bytes"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestRotateCAPhases: each step moves the rotation one phase and only
// from the phase before it; the bundles, pins and the signing CA follow
// the phase; finish waits until no certificate on record of an active or
// joining node is signed by the old CA, then makes next the current CA.
func TestRotateCAPhases(t *testing.T) {
	old, next := pkitest.NewCA(t, "lab"), pkitest.NewCA(t, "lab")
	cl := Cluster{ID: "c", Name: "lab", CACert: old.CertPEM(), NebulaCACert: old.NebulaCertPEM(),
		CAFingerprint: old.Fingerprint().String()}
	w := pkitest.NewIdentity(t, old, "w1", pki.RoleWorker, pkitest.IP(2))
	gone := pkitest.NewIdentity(t, old, "w2", pki.RoleWorker, pkitest.IP(3))
	s := &Snapshot{Cluster: &cl, Nodes: map[string]Node{
		"n1": {ID: "n1", Name: "w1", State: NodeActive, TLSCert: w.Cert, NebulaCert: w.NebulaCert},
		"n2": {ID: "n2", Name: "w2", State: NodeRemoved, TLSCert: gone.Cert, NebulaCert: gone.NebulaCert},
	}}
	nextFP := next.Fingerprint().String()
	at := pkitest.Now
	step := func(c RotateCA) error { c.At = at; return s.apply(c) }

	if s.Cluster.Phase() != CAPhaseNone || len(s.Cluster.Pins()) != 1 || s.Cluster.SigningCA() != cl.CAFingerprint {
		t.Fatalf("before: phase %s pins %v", s.Cluster.Phase(), s.Cluster.Pins())
	}
	if err := step(RotateCA{Step: CAReissue, Next: nextFP}); codes.Of(err) != codes.BadRequest {
		t.Fatalf("reissue without a rotation: %v", err)
	}
	begin := RotateCA{Step: CABegin, Next: nextFP, NextCACert: next.CertPEM(), NextNebulaCACert: next.NebulaCertPEM()}
	bad := begin
	bad.Next = old.Fingerprint().String()
	if err := step(bad); codes.Of(err) != codes.BadRequest {
		t.Fatalf("begin naming another fingerprint: %v", err)
	}
	if err := step(begin); err != nil {
		t.Fatal(err)
	}
	c := s.Cluster
	if c.Phase() != CAPhaseTrust || c.SigningCA() != cl.CAFingerprint || len(c.Pins()) != 2 || c.Pins()[1] != nextFP {
		t.Fatalf("trust: phase %s signing %s pins %v", c.Phase(), pki.ShortID(c.SigningCA()), c.Pins())
	}
	if cas, _ := pki.BundleCerts(c.TrustBundle()); len(cas) != 2 || !bytes.Contains(c.NebulaTrustBundle(), bytes.TrimSpace(next.NebulaCertPEM())) {
		t.Fatalf("trust: the bundles do not carry both CAs")
	}
	if err := step(begin); codes.Of(err) != codes.BadRequest {
		t.Fatalf("a second begin: %v", err)
	}
	if err := step(RotateCA{Step: CAFinish, Next: nextFP}); codes.Of(err) != codes.BadRequest {
		t.Fatalf("finish from trust: %v", err)
	}
	if err := step(RotateCA{Step: CAReissue, Next: nextFP}); err != nil {
		t.Fatal(err)
	}
	if c.SigningCA() != nextFP {
		t.Fatalf("reissue: signing with %s, want next", pki.ShortID(c.SigningCA()))
	}
	if tc, _ := c.SigningCACerts(); !bytes.Equal(tc, next.CertPEM()) {
		t.Fatal("reissue: SigningCACerts is not next")
	}
	// w1 still runs on old certificates; the removed w2 does not count.
	deps := s.OldDependents()
	if len(deps) != 2 || deps[0] != "w1: tls" || deps[1] != "w1: nebula" {
		t.Fatalf("dependents %v, want w1's two", deps)
	}
	if err := step(RotateCA{Step: CAFinish, Next: nextFP}); codes.Of(err) != codes.CARotationStalled {
		t.Fatalf("finish with w1 under the old CA: %v", err)
	}
	wn := pkitest.NewIdentity(t, next, "w1", pki.RoleWorker, pkitest.IP(2))
	n := s.Nodes["n1"]
	n.TLSCert = wn.Cert
	s.Nodes["n1"] = n
	if deps := s.OldDependents(); len(deps) != 1 || deps[0] != "w1: nebula" {
		t.Fatalf("dependents %v, want w1's Nebula cert", deps)
	}
	n.NebulaCert = wn.NebulaCert
	s.Nodes["n1"] = n
	if err := step(RotateCA{Step: CAFinish, Next: nextFP}); err != nil {
		t.Fatal(err)
	}
	c = s.Cluster
	if c.Phase() != CAPhaseNone || c.CAFingerprint != nextFP || !bytes.Equal(c.CACert, next.CertPEM()) ||
		!bytes.Equal(c.NebulaCACert, next.NebulaCertPEM()) || !c.CARotated.Equal(at) {
		t.Fatalf("after finish: phase %s CA %s", c.Phase(), pki.ShortID(c.CAFingerprint))
	}
	if cas, _ := pki.BundleCerts(c.TrustBundle()); len(cas) != 1 {
		t.Fatal("after finish: the bundle still has two CAs")
	}
	if got := s.Audit[len(s.Audit)-1]; got.Code != codes.EventCARotated {
		t.Fatalf("audit %v", got)
	}
}
