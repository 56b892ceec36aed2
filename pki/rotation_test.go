package pki_test

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// under is id with its TLS leaf signed by ca (same key, an hour from the
// wall clock) and bundle as its CA certificates.
func under(t *testing.T, ca *pki.CA, id *pki.Identity, bundle ...[]byte) *pki.Identity {
	t.Helper()
	next := *atWallClock(t, ca, id)
	next.CACert = pki.Bundle(bundle...)
	return &next
}

// TestLiveBundleRotation: a CA rotation as the TLS code paths see it. A
// listener and a client made once follow their LiveIdentity's bundle at
// every handshake (no restart); a leaf under the next CA is refused until
// the peer's bundle holds it; a reissued listener still answers a joiner
// that pins the old CA (PinProto) with its leaf under the old CA, until
// the old CA leaves its bundle.
func TestLiveBundleRotation(t *testing.T) {
	oldCA, nextCA := pkitest.NewCA(t, "prod"), pkitest.NewCA(t, "prod")
	oldPEM, nextPEM := oldCA.CertPEM(), nextCA.CertPEM()
	srvID := pkitest.NewIdentity(t, oldCA, "c1", pki.RoleControl, pkitest.IP(1))
	cliID := pkitest.NewIdentity(t, oldCA, "c2", pki.RoleControl, pkitest.IP(2))
	srv, err := pki.NewLiveIdentity(under(t, oldCA, srvID, oldPEM))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := pki.NewLiveIdentity(under(t, oldCA, cliID, oldPEM))
	if err != nil {
		t.Fatal(err)
	}
	serverConf, err := pki.LiveServerTLSConfig(srv, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	clientConf, err := pki.LiveClientTLSConfig(cli, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverConf)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte{1})
			_ = c.Close()
		}
	}()
	mtls := func() error {
		c, err := tls.Dial("tcp", ln.Addr().String(), clientConf)
		if err != nil {
			return err
		}
		defer c.Close()
		var b [1]byte
		_, err = c.Read(b[:])
		return err
	}
	// pinned dials as a joiner does: no client certificate, the ALPN
	// offer naming the pin, VerifyPinnedAny deciding.
	pinned := func(sni pki.Fingerprint, pins ...pki.Fingerprint) (*tls.Conn, error) {
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		var rawCerts [][]byte
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{pki.PinProto(sni), "http/1.1"},
			VerifyConnection: func(cs tls.ConnectionState) error {
				rawCerts = nil
				for _, pc := range cs.PeerCertificates {
					rawCerts = append(rawCerts, pc.Raw)
				}
				_, err := pki.VerifyPinnedAny(rawCerts, pins, time.Now())
				return err
			}})
		return c, c.Handshake()
	}
	if err := mtls(); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	// A client leaf under the next CA, the server not trusting it yet.
	if err := cli.Swap(under(t, nextCA, cliID, oldPEM, nextPEM)); err != nil {
		t.Fatal(err)
	}
	if err := mtls(); err == nil {
		t.Fatal("the server accepted a leaf of a CA outside its bundle")
	}
	// The server's bundle gains the next CA: same listener, same config.
	if err := srv.Swap(under(t, oldCA, srvID, oldPEM, nextPEM)); err != nil {
		t.Fatal(err)
	}
	if err := mtls(); err != nil {
		t.Fatalf("after the server trusts both CAs: %v", err)
	}
	// The server's leaf is reissued under next; the client trusts both.
	if err := srv.Swap(under(t, nextCA, srvID, oldPEM, nextPEM)); err != nil {
		t.Fatal(err)
	}
	if err := mtls(); err != nil {
		t.Fatalf("both leaves under next: %v", err)
	}
	oldFP, nextFP := oldCA.Fingerprint(), nextCA.Fingerprint()
	c, err := pinned(oldFP, oldFP)
	if err != nil {
		t.Fatalf("a token pinning only the old CA, during the rotation: %v", err)
	}
	if got := c.ConnectionState().PeerCertificates[0]; pki.IssuerIn(oldPEM, got) == nil {
		t.Error("the held leaf under the old CA was not presented")
	}
	c.Close()
	if c, err = pinned(nextFP, oldFP, nextFP); err != nil {
		t.Fatalf("a token pinning both: %v", err)
	}
	c.Close()

	// The old CA leaves both bundles: the held leaf goes with it.
	if err := cli.Swap(under(t, nextCA, cliID, nextPEM)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Swap(under(t, nextCA, srvID, nextPEM)); err != nil {
		t.Fatal(err)
	}
	if err := mtls(); err != nil {
		t.Fatalf("after the old CA left: %v", err)
	}
	if c, err = pinned(oldFP, oldFP); err == nil || codes.Of(err) != codes.CAMismatch {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a token pinning only the dropped CA: err %v, want CAMismatch", err)
	}
	c.Close()
	if err := cli.Swap(under(t, oldCA, cliID, oldPEM)); err != nil {
		t.Fatal(err)
	}
	if err := mtls(); err == nil {
		t.Fatal("a leaf of the dropped CA was accepted")
	}
}

func TestPinnedAnyRefusesZero(t *testing.T) {
	_, err := pki.VerifyPinnedAny(nil, []pki.Fingerprint{{}}, time.Now())
	if codes.Of(err) != codes.CAMismatch {
		t.Fatalf("err %v, want CAMismatch", err)
	}
}

// TestIssuerHelpers: which CA of a bundle issued a leaf, for X.509 and
// Nebula certificates.
func TestIssuerHelpers(t *testing.T) {
	a, b := pkitest.NewCA(t, "prod"), pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, b, "n1", pki.RoleWorker, pkitest.IP(2))
	if pki.IssuedBy(a.CertPEM(), id.Cert) || !pki.IssuedBy(b.CertPEM(), id.Cert) {
		t.Error("IssuedBy: wrong CA")
	}
	if !pki.IssuedBy(pki.Bundle(a.CertPEM(), b.CertPEM()), id.Cert) {
		t.Error("IssuedBy: the second CA of a bundle")
	}
	if pki.NebulaIssuedBy(a.NebulaCertPEM(), id.NebulaCert) || !pki.NebulaIssuedBy(b.NebulaCertPEM(), id.NebulaCert) {
		t.Error("NebulaIssuedBy: wrong CA")
	}
	fp, err := pki.NebulaFingerprint(b.NebulaCertPEM())
	if err != nil {
		t.Fatal(err)
	}
	if is, _ := pki.NebulaIssuer(id.NebulaCert); is != fp {
		t.Errorf("NebulaIssuer %s, want %s", is, fp)
	}
	if pki.BundleID(a.CertPEM(), a.NebulaCertPEM()) == pki.BundleID(pki.Bundle(a.CertPEM(), b.CertPEM()), a.NebulaCertPEM()) {
		t.Error("BundleID does not change with the bundle")
	}
}

// TestHold: a node restarted during a CA rotation takes back the leaf it
// held under the old CA (same key) and serves it again to a joiner that
// pins the old CA; a leaf of another key, of the current leaf's CA or of a
// CA outside the bundle is refused; the held leaf goes with its CA.
func TestHold(t *testing.T) {
	oldCA, nextCA := pkitest.NewCA(t, "prod"), pkitest.NewCA(t, "prod")
	oldPEM, nextPEM := oldCA.CertPEM(), nextCA.CertPEM()
	srvID := pkitest.NewIdentity(t, oldCA, "c1", pki.RoleControl, pkitest.IP(1))
	oldLeaf := under(t, oldCA, srvID, oldPEM).Cert
	restarted, err := pki.NewLiveIdentity(under(t, nextCA, srvID, oldPEM, nextPEM))
	if err != nil {
		t.Fatal(err)
	}
	if len(restarted.HeldLeaves()) != 0 {
		t.Fatal("a fresh identity holds a leaf")
	}
	other := pkitest.NewIdentity(t, oldCA, "c2", pki.RoleControl, pkitest.IP(2))
	foreign := pkitest.NewCA(t, "prod")
	for name, leaf := range map[string][]byte{
		"another key":            other.Cert,
		"the current CA":         under(t, nextCA, srvID, oldPEM, nextPEM).Cert,
		"a CA not in the bundle": under(t, foreign, srvID, oldPEM).Cert,
	} {
		if err := restarted.Hold(leaf); err == nil {
			t.Errorf("Hold accepted a leaf of %s", name)
		}
	}
	if err := restarted.Hold(oldLeaf); err != nil {
		t.Fatal(err)
	}
	if h := restarted.HeldLeaves(); len(h) != 1 || !pki.IssuedBy(oldPEM, h[0]) {
		t.Fatalf("held %d leaves", len(h))
	}
	conf, err := pki.LiveServerTLSConfig(restarted, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	hello := &tls.ClientHelloInfo{SupportedProtos: []string{pki.PinProto(oldCA.Fingerprint()), "http/1.1"}}
	got, err := conf.GetCertificate(hello)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.VerifyPinned(got.Certificate, oldCA.Fingerprint(), time.Now()); err != nil {
		t.Fatalf("the restarted seed does not answer an old-CA token: %v", err)
	}
	if err := restarted.Swap(under(t, nextCA, srvID, nextPEM)); err != nil {
		t.Fatal(err)
	}
	if len(restarted.HeldLeaves()) != 0 {
		t.Fatal("the held leaf stayed after its CA left the bundle")
	}
}

// TestSaveTrustBundles replaces only the two CA files of a saved identity;
// it still loads, with the new bundles; a bundle that does not parse is
// refused and nothing is written.
func TestSaveTrustBundles(t *testing.T) {
	a, b := pkitest.NewCA(t, "prod"), pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, a, "n1", pki.RoleWorker, pkitest.IP(2))
	dir := t.TempDir()
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	tlsB, nebB := pki.Bundle(a.CertPEM(), b.CertPEM()), pki.Bundle(a.NebulaCertPEM(), b.NebulaCertPEM())
	if err := pki.SaveTrustBundles(dir, tlsB, nebB); err != nil {
		t.Fatal(err)
	}
	got, err := pki.LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CACert, tlsB) || !bytes.Equal(got.NebulaCACert, nebB) || !bytes.Equal(got.Cert, id.Cert) {
		t.Fatal("the bundles were not replaced, or something else was")
	}
	if err := pki.SaveTrustBundles(dir, []byte("garbage"), nebB); err == nil {
		t.Fatal("a garbage bundle was saved")
	}
	if again, _ := pki.LoadIdentity(dir); again == nil || !bytes.Equal(again.CACert, tlsB) {
		t.Fatal("a refused save changed the identity")
	}
}
