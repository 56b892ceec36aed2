package pki_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// renewReq is the renewal of id's leaf as the CA holder builds it from the
// node's record: the recorded public key, name, node id, role and IPs.
func renewReq(t *testing.T, id *pki.Identity, lifetime time.Duration) pki.KeyLeafRequest {
	t.Helper()
	pub, err := pki.PublicKeyDER(id.Cert)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := id.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	role, _ := pki.RoleOf(leaf)
	var ips []netip.Addr
	for _, ip := range leaf.IPAddresses {
		a, _ := netip.AddrFromSlice(ip)
		ips = append(ips, a.Unmap())
	}
	return pki.KeyLeafRequest{PublicKey: pub, Name: leaf.Subject.CommonName, NodeID: pki.NodeIDOf(leaf),
		Role: role, IPs: ips, Lifetime: lifetime}
}

// TestSignTLSKey: a leaf signed for a recorded public key certifies that
// key (the node's own private key pairs with it), keeps the node's name,
// id, role, IPs and usages, and lasts exactly the requested lifetime.
func TestSignTLSKey(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	for _, role := range []pki.Role{pki.RoleControl, pki.RoleWorker} {
		t.Run(string(role), func(t *testing.T) {
			id := pkitest.NewIdentity(t, ca, "n1", role, pkitest.IP(2))
			at := pkitest.Now.Add(time.Hour)
			out, err := ca.SignTLSKey(renewReq(t, id, 6*time.Second), at)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tls.X509KeyPair(out, id.Key); err != nil {
				t.Fatalf("the renewed leaf does not certify the node's key: %v", err)
			}
			got, old := parseLeaf(t, out), parseLeaf(t, id.Cert)
			if want := at.Add(6 * time.Second).UTC().Truncate(time.Second); !got.NotAfter.Equal(want) {
				t.Errorf("NotAfter %s, want %s (lifetime honoured)", got.NotAfter, want)
			}
			if want := at.Add(-pki.LeafBackdate).UTC().Truncate(time.Second); !got.NotBefore.Equal(want) {
				t.Errorf("NotBefore %s, want %s", got.NotBefore, want)
			}
			r, _ := pki.RoleOf(got)
			if r != role || got.Subject.CommonName != "n1" || pki.NodeIDOf(got) != "id-n1" ||
				!slices.Equal(got.ExtKeyUsage, old.ExtKeyUsage) || len(got.IPAddresses) != len(old.IPAddresses) {
				t.Errorf("renewed leaf %s role %s id %s usages %v ips %v; want the original's", got.Subject.CommonName, r,
					pki.NodeIDOf(got), got.ExtKeyUsage, got.IPAddresses)
			}
			if got.SerialNumber.Cmp(old.SerialNumber) == 0 {
				t.Error("the renewed leaf reuses the old serial number")
			}
		})
	}
}

func TestSignTLSKeyRefusals(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(2))
	for name, edit := range map[string]func(*pki.KeyLeafRequest){
		"fail/garbage key": func(r *pki.KeyLeafRequest) { r.PublicKey = []byte("not a key") },
		"fail/no key":      func(r *pki.KeyLeafRequest) { r.PublicKey = nil },
		"fail/no node id":  func(r *pki.KeyLeafRequest) { r.NodeID = "" },
		"fail/no name":     func(r *pki.KeyLeafRequest) { r.Name = "" },
	} {
		t.Run(name, func(t *testing.T) {
			req := renewReq(t, id, time.Hour)
			edit(&req)
			if out, err := ca.SignTLSKey(req, pkitest.Now); codes.Of(err) != codes.EnrollRejected || out != nil {
				t.Fatalf("SignTLSKey = %d bytes, %v; want %s", len(out), err, codes.EnrollRejected)
			}
		})
	}
	req := renewReq(t, id, time.Hour)
	req.Role = "admin"
	if _, err := ca.SignTLSKey(req, pkitest.Now); codes.Of(err) != codes.BadRole {
		t.Fatalf("bad role: %v, want %s", err, codes.BadRole)
	}
}

// TestDefaultLeafLifetime: a leaf signed without a lifetime lasts the
// 30-day default, so a node that never renews stops within a month.
func TestDefaultLeafLifetime(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(2))
	if leaf := parseLeaf(t, id.Cert); !leaf.NotAfter.Equal(pkitest.Now.Add(30 * 24 * time.Hour)) {
		t.Fatalf("admission leaf expires %s, want 30 days after %s", leaf.NotAfter, pkitest.Now)
	}
	out, err := ca.SignTLSKey(renewReq(t, id, 0), pkitest.Now)
	if err != nil {
		t.Fatal(err)
	}
	if leaf := parseLeaf(t, out); !leaf.NotAfter.Equal(pkitest.Now.Add(pki.DefaultLeafLifetime)) ||
		pki.DefaultLeafLifetime != 30*24*time.Hour {
		t.Fatalf("renewed leaf expires %s, want %s", leaf.NotAfter, pkitest.Now.Add(30*24*time.Hour))
	}
}

func TestCheckRenewedLeaf(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	other := pkitest.NewCA(t, "other")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleControl, pkitest.IP(2))
	stranger := pkitest.NewIdentity(t, ca, "n2", pki.RoleControl, pkitest.IP(3))
	at := pkitest.Now.Add(time.Hour)
	sign := func(c *pki.CA, edit func(*pki.KeyLeafRequest)) []byte {
		req := renewReq(t, id, 0)
		edit(&req)
		out, err := c.SignTLSKey(req, at)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	strangerKey, _ := pki.PublicKeyDER(stranger.Cert)
	tests := []struct {
		name string
		next []byte
		ok   bool
	}{
		{"ok/renewed", sign(ca, func(*pki.KeyLeafRequest) {}), true},
		{"fail/another key", sign(ca, func(r *pki.KeyLeafRequest) { r.PublicKey = strangerKey }), false},
		{"fail/another CA", sign(other, func(*pki.KeyLeafRequest) {}), false},
		{"fail/another name", sign(ca, func(r *pki.KeyLeafRequest) { r.Name = "n9" }), false},
		{"fail/another node id", sign(ca, func(r *pki.KeyLeafRequest) { r.NodeID = "id-n9" }), false},
		{"fail/another role", sign(ca, func(r *pki.KeyLeafRequest) { r.Role = pki.RoleWorker }), false},
		{"fail/expires earlier", sign(ca, func(r *pki.KeyLeafRequest) { r.Lifetime = time.Hour }), false},
		{"fail/not PEM", []byte("garbage"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leaf, err := pki.CheckRenewedLeaf(id, tt.next, at)
			if tt.ok {
				if err != nil || leaf == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if codes.Of(err) != codes.CertRefused || leaf != nil {
				t.Fatalf("CheckRenewedLeaf = %v, %v; want %s", leaf, err, codes.CertRefused)
			}
		})
	}
}

// TestLiveIdentitySwap: listeners and clients built from a LiveIdentity
// present the swapped-in leaf at their next handshake, with no restart,
// while a connection made before the swap keeps working.
func TestLiveIdentitySwap(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	// Handshakes judge validity at the wall clock: leaves valid now.
	srvID := atWallClock(t, ca, pkitest.NewIdentity(t, ca, "c1", pki.RoleControl, pkitest.IP(1)))
	cliID := atWallClock(t, ca, pkitest.NewIdentity(t, ca, "c2", pki.RoleControl, pkitest.IP(2)))
	srvLive, err := pki.NewLiveIdentity(srvID)
	if err != nil {
		t.Fatal(err)
	}
	cliLive, err := pki.NewLiveIdentity(cliID)
	if err != nil {
		t.Fatal(err)
	}
	serverConf, err := pki.LiveServerTLSConfig(srvLive, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	clientConf, err := pki.LiveClientTLSConfig(cliLive, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverConf)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peerLeaves := make(chan []byte, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.HandshakeContext(context.Background()) == nil {
				peerLeaves <- tc.ConnectionState().PeerCertificates[0].Raw
			}
			_, _ = c.Write([]byte{1})
		}
	}()
	dial := func() (serverLeaf, clientLeaf []byte, conn net.Conn) {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), clientConf)
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		select {
		case cl := <-peerLeaves:
			return c.ConnectionState().PeerCertificates[0].Raw, cl, c
		case <-time.After(5 * time.Second):
			t.Fatal("the server saw no handshake")
		}
		return nil, nil, nil
	}
	s1, c1, before := dial()
	defer before.Close()

	renew := func(l *pki.LiveIdentity, id *pki.Identity) {
		out, err := ca.SignTLSKey(renewReq(t, id, 60*24*time.Hour), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		next := *id
		next.Cert = out
		if err := l.Swap(&next); err != nil {
			t.Fatal(err)
		}
	}
	renew(srvLive, srvID)
	renew(cliLive, cliID)
	s2, c2, after := dial()
	defer after.Close()
	if bytes.Equal(s1, s2) || !bytes.Equal(s2, srvLive.Leaf().Raw) {
		t.Error("the listener still presents the old leaf after Swap")
	}
	if bytes.Equal(c1, c2) || !bytes.Equal(c2, cliLive.Leaf().Raw) {
		t.Error("the client still presents the old leaf after Swap")
	}
	if _, err := before.Write([]byte{1}); err != nil {
		t.Errorf("the connection made before the swap broke: %v", err)
	}
}

// atWallClock is id with its leaf re-signed for an hour from time.Now.
func atWallClock(t *testing.T, ca *pki.CA, id *pki.Identity) *pki.Identity {
	t.Helper()
	out, err := ca.SignTLSKey(renewReq(t, id, time.Hour), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	next := *id
	next.Cert = out
	return &next
}

// TestSwapRefusesMismatchedKey: a leaf that does not pair with the key is
// never swapped in; the old identity stays.
func TestSwapRefusesMismatchedKey(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(2))
	other := pkitest.NewIdentity(t, ca, "n2", pki.RoleWorker, pkitest.IP(3))
	l, err := pki.NewLiveIdentity(id)
	if err != nil {
		t.Fatal(err)
	}
	bad := *id
	bad.Cert = other.Cert
	if err := l.Swap(&bad); err == nil {
		t.Fatal("Swap accepted a leaf for another key")
	}
	if l.Identity() != id {
		t.Fatal("a refused Swap changed the identity")
	}
}

// TestSaveTLSLeaf replaces only the leaf file of a saved identity.
func TestSaveTLSLeaf(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(2))
	dir := t.TempDir()
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	out, err := ca.SignTLSKey(renewReq(t, id, 60*24*time.Hour), pkitest.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.SaveTLSLeaf(dir, out); err != nil {
		t.Fatal(err)
	}
	got, err := pki.LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Cert, out) || !bytes.Equal(got.Key, id.Key) || !bytes.Equal(got.NebulaCert, id.NebulaCert) {
		t.Fatal("the saved identity is not the old one with the new leaf")
	}
	st, err := os.Stat(filepath.Join(dir, "tls", "node.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode(), err)
	}
}
