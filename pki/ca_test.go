package pki_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestCASaveLoad(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	if got := ca.Cert().NotBefore; !got.Equal(pkitest.Now.Add(-time.Hour)) {
		t.Errorf("CA NotBefore = %v, want now-1h", got)
	}
	if got := ca.Cert().NotAfter; !got.Equal(pkitest.Now.Add(pki.DefaultCALifetime)) {
		t.Errorf("CA NotAfter = %v, want now+DefaultCALifetime", got)
	}
	if !ca.Cert().IsCA {
		t.Error("CA certificate is not a CA")
	}
	dir := filepath.Join(t.TempDir(), "ca")
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"ca.crt": 0o644, "ca.key": 0o600, "nebula-ca.crt": 0o644, "nebula-ca.key": 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode = %o, want %o", name, st.Mode().Perm(), want)
		}
	}
	got, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Fingerprint() != ca.Fingerprint() {
		t.Error("loaded CA fingerprint differs")
	}
	if !bytes.Equal(got.CertPEM(), ca.CertPEM()) || !bytes.Equal(got.NebulaCertPEM(), ca.NebulaCertPEM()) {
		t.Error("loaded CA certificates differ")
	}
	// The loaded CA signs leaves that chain to the original.
	id := pkitest.NewIdentity(t, got, "n1", pki.RoleControl, pkitest.IP(9))
	cs, err := id.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.VerifyPinned(cs.Certificate, ca.Fingerprint(), pkitest.Now); err != nil {
		t.Errorf("leaf from the loaded CA: %v", err)
	}
}

func TestLoadCARefusesOpenKey(t *testing.T) {
	for _, name := range []string{"ca.key", "nebula-ca.key"} {
		t.Run("fail/"+name, func(t *testing.T) {
			dir := t.TempDir()
			if err := pkitest.NewCA(t, "prod").Save(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, name), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := pki.LoadCA(dir)
			if codes.Of(err) != codes.KeyPermissions {
				t.Fatalf("LoadCA = %v, want %s", err, codes.KeyPermissions)
			}
		})
	}
}

func TestSignTLS(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	keys, err := pki.NewKeys("n1")
	if err != nil {
		t.Fatal(err)
	}
	badSig := slices.Clone(keys.CSR)
	badSig[len(badSig)-1] ^= 0xff
	ip := netip.MustParseAddr("192.0.2.7")
	tests := []struct {
		name      string
		req       pki.LeafRequest
		now       time.Time
		wantCode  codes.Code
		wantUsage []x509.ExtKeyUsage
		wantAfter time.Time
	}{
		{
			name:      "ok/control",
			req:       pki.LeafRequest{CSR: keys.CSR, Name: "n1", NodeID: "abc", Role: pki.RoleControl, IPs: []netip.Addr{ip}},
			wantUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			wantAfter: pkitest.Now.Add(pki.DefaultLeafLifetime),
		},
		{
			name:      "ok/worker",
			req:       pki.LeafRequest{CSR: keys.CSR, Name: "n1", NodeID: "abc", Role: pki.RoleWorker, Lifetime: time.Hour},
			wantUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			wantAfter: pkitest.Now.Add(time.Hour),
		},
		{
			name:      "ok/capped-at-CA-expiry",
			req:       pki.LeafRequest{CSR: keys.CSR, Name: "n1", NodeID: "abc", Role: pki.RoleWorker},
			now:       ca.Cert().NotAfter.Add(-24 * time.Hour),
			wantUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			wantAfter: ca.Cert().NotAfter,
		},
		{name: "fail/bad-role", req: pki.LeafRequest{CSR: keys.CSR, Name: "n1", NodeID: "abc", Role: "admin"}, wantCode: codes.BadRole},
		{name: "fail/empty-role", req: pki.LeafRequest{CSR: keys.CSR, Name: "n1", NodeID: "abc"}, wantCode: codes.BadRole},
		{name: "fail/bad-csr-signature", req: pki.LeafRequest{CSR: badSig, Name: "n1", NodeID: "abc", Role: pki.RoleWorker}, wantCode: codes.EnrollRejected},
		{name: "fail/garbage-csr", req: pki.LeafRequest{CSR: []byte("nope"), Name: "n1", NodeID: "abc", Role: pki.RoleWorker}, wantCode: codes.EnrollRejected},
		{name: "fail/no-node-id", req: pki.LeafRequest{CSR: keys.CSR, Name: "n1", Role: pki.RoleWorker}, wantCode: codes.EnrollRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = pkitest.Now
			}
			out, err := ca.SignTLS(tt.req, now)
			if tt.wantCode != "" {
				if codes.Of(err) != tt.wantCode {
					t.Fatalf("SignTLS = %v, want %s", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			leaf := parseLeaf(t, out)
			if !slices.Equal(leaf.ExtKeyUsage, tt.wantUsage) {
				t.Errorf("ExtKeyUsage = %v, want %v", leaf.ExtKeyUsage, tt.wantUsage)
			}
			if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("KeyUsage = %v, want DigitalSignature", leaf.KeyUsage)
			}
			if !leaf.NotAfter.Equal(tt.wantAfter) {
				t.Errorf("NotAfter = %v, want %v", leaf.NotAfter, tt.wantAfter)
			}
			if want := now.Add(-5 * time.Minute); !leaf.NotBefore.Equal(want) {
				t.Errorf("NotBefore = %v, want %v", leaf.NotBefore, want)
			}
			if role, err := pki.RoleOf(leaf); err != nil || role != tt.req.Role {
				t.Errorf("RoleOf = %q, %v; want %q", role, err, tt.req.Role)
			}
			if got := pki.NodeIDOf(leaf); got != "abc" {
				t.Errorf("NodeIDOf = %q, want abc", got)
			}
			if leaf.Subject.CommonName != "n1" || !slices.Equal(leaf.DNSNames, []string{"n1"}) ||
				!slices.Equal(leaf.Subject.Organization, []string{"meshd"}) {
				t.Errorf("subject %v, DNS %v", leaf.Subject, leaf.DNSNames)
			}
			if len(tt.req.IPs) > 0 && (len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(ip.AsSlice())) {
				t.Errorf("IP SANs = %v, want [%v]", leaf.IPAddresses, ip)
			}
			if leaf.SerialNumber.BitLen() < 64 {
				t.Errorf("serial %v looks too short to be random 128-bit", leaf.SerialNumber)
			}
			csr, _ := x509.ParseCertificateRequest(keys.CSR)
			if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(csr.PublicKey) {
				t.Error("leaf does not certify the CSR's key")
			}
			if err := leaf.CheckSignatureFrom(ca.Cert()); err != nil {
				t.Errorf("leaf not signed by the CA: %v", err)
			}
		})
	}
}

func parseLeaf(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	id := &pki.Identity{Cert: pemBytes}
	leaf, err := id.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func TestSignNebula(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	keys, err := pki.NewKeys("n1")
	if err != nil {
		t.Fatal(err)
	}
	p256Pub := cert.MarshalPublicKeyToPEM(cert.Curve_P256, append([]byte{4}, make([]byte, 64)...))
	tests := []struct {
		name     string
		req      pki.NebulaRequest
		wantCode codes.Code
		wantErr  bool
	}{
		{name: "ok/host", req: pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "n1", IP: pkitest.IP(7), Groups: []string{"worker"}}},
		{name: "fail/ip-outside-overlay", req: pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "n1", IP: netip.MustParsePrefix("10.43.0.7/16")}, wantErr: true},
		{name: "fail/wrong-prefix-length", req: pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "n1", IP: netip.MustParsePrefix("10.42.0.7/24")}, wantErr: true},
		{name: "fail/network-address", req: pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "n1", IP: netip.MustParsePrefix("10.42.0.0/16")}, wantErr: true},
		{name: "fail/curve-mismatch", req: pki.NebulaRequest{PublicKey: p256Pub, Name: "n1", IP: pkitest.IP(7)}, wantCode: codes.EnrollRejected},
		{name: "fail/not-a-key", req: pki.NebulaRequest{PublicKey: []byte("x"), Name: "n1", IP: pkitest.IP(7)}, wantCode: codes.EnrollRejected},
		{name: "fail/private-key-sent", req: pki.NebulaRequest{PublicKey: keys.NebulaKeyPEM, Name: "n1", IP: pkitest.IP(7)}, wantCode: codes.EnrollRejected},
	}
	pool, err := cert.NewCAPoolFromPEM(ca.NebulaCertPEM())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := ca.SignNebula(tt.req, pkitest.Now)
			switch {
			case tt.wantCode != "":
				if codes.Of(err) != tt.wantCode {
					t.Fatalf("SignNebula = %v, want %s", err, tt.wantCode)
				}
				return
			case tt.wantErr:
				if err == nil {
					t.Fatal("SignNebula succeeded, want an error")
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			c, _, err := cert.UnmarshalCertificateFromPEM(out)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.VerifyCertificate(pkitest.Now, c); err != nil {
				t.Fatalf("host certificate does not verify: %v", err)
			}
			if !slices.Equal(c.Networks(), []netip.Prefix{tt.req.IP}) {
				t.Errorf("Networks = %v, want [%v]", c.Networks(), tt.req.IP)
			}
			if !slices.Equal(c.Groups(), tt.req.Groups) || c.Name() != tt.req.Name {
				t.Errorf("name %q groups %v", c.Name(), c.Groups())
			}
			if c.NotBefore().Before(ca.Cert().NotBefore) || c.NotAfter().After(ca.Cert().NotAfter) {
				t.Errorf("validity %v..%v outside the CA's", c.NotBefore(), c.NotAfter())
			}
			if !bytes.Equal(c.MarshalPublicKeyPEM(), keys.NebulaPublicPEM) {
				t.Error("host certificate does not carry the requested key")
			}
			if _, err := pool.VerifyCertificate(c.NotAfter().Add(time.Second), c); err == nil {
				t.Error("host certificate still verifies after its expiry")
			}
		})
	}
}

func TestLoadCASEC1Key(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, "ca.key")
	pkcs8, err := pki.ReadKeyFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(pkcs8)
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		key     []byte
		wantErr bool
	}{
		{name: "ok/sec1", key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})},
		{name: "fail/malformed-sec1", key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1[:20]}), wantErr: true},
		{name: "fail/malformed-pkcs8", key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: sec1}), wantErr: true},
		{name: "fail/not-a-key", key: ca.CertPEM(), wantErr: true},
		{name: "fail/not-pem", key: []byte("junk"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := pki.WriteFileAtomic(keyPath, tt.key, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := pki.LoadCA(dir)
			if tt.wantErr {
				if err == nil {
					t.Fatal("LoadCA succeeded, want an error")
				}
				if contains(err.Error(), "PRIVATE KEY-----") {
					t.Errorf("error shows key material: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Fingerprint() != ca.Fingerprint() {
				t.Error("loaded CA fingerprint differs")
			}
			chain := pkitest.NewIdentity(t, got, "c1", pki.RoleControl, pkitest.IP(1))
			tc, err := chain.TLSCertificate()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pki.VerifyPinned(tc.Certificate, ca.Fingerprint(), pkitest.Now); err != nil {
				t.Errorf("leaf from the SEC 1-loaded CA: %v", err)
			}
		})
	}
}
