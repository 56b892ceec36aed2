package pki_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// chain returns id's TLS chain as sent on the wire: leaf, CA.
func chain(t *testing.T, id *pki.Identity) [][]byte {
	t.Helper()
	tc, err := id.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if len(tc.Certificate) != 2 {
		t.Fatalf("chain has %d certificates, want leaf and CA", len(tc.Certificate))
	}
	return tc.Certificate
}

func TestVerifyPinned(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	other := pkitest.NewCA(t, "prod") // same name, independent keys
	control := chain(t, pkitest.NewIdentity(t, ca, "c1", pki.RoleControl, pkitest.IP(1)))
	worker := chain(t, pkitest.NewIdentity(t, ca, "w1", pki.RoleWorker, pkitest.IP(2)))
	foreign := chain(t, pkitest.NewIdentity(t, other, "c1", pki.RoleControl, pkitest.IP(1)))
	pin := ca.Fingerprint()
	lastByte := pin
	lastByte[len(lastByte)-1] ^= 0x01 // agrees with pin on all but the last byte
	// Leaves SignTLS would never issue, so that the role check and the
	// server-auth check each stand alone.
	controlNoServerAuth := pkitest.CraftLeaf(t, ca, "c1", pki.RoleControl, x509.ExtKeyUsageClientAuth)
	workerServerAuth := pkitest.CraftLeaf(t, ca, "w1", pki.RoleWorker, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	noRoleServerAuth := pkitest.CraftLeaf(t, ca, "c1", "", x509.ExtKeyUsageServerAuth)
	controlServerAuthOnly := pkitest.CraftLeaf(t, ca, "c1", pki.RoleControl, x509.ExtKeyUsageServerAuth)
	leafExpiry := pkitest.Now.Add(pki.DefaultLeafLifetime)

	tests := []struct {
		name  string
		certs [][]byte
		pin   pki.Fingerprint
		now   time.Time
		want  codes.Code // "" means verified
	}{
		{name: "ok/control", certs: control, pin: pin},
		{name: "ok/extra-cert-before-ca", certs: [][]byte{control[0], foreign[1], control[1]}, pin: pin},
		{name: "ok/crafted-control-server-auth-only", certs: controlServerAuthOnly, pin: pin},
		{name: "fail/zero-pin", certs: control, want: codes.CAMismatch},
		{name: "fail/pin-last-byte-differs", certs: control, pin: lastByte, want: codes.CAMismatch},
		{name: "fail/other-ca", certs: foreign, pin: pin, want: codes.CAMismatch},
		{name: "fail/other-ca-leaf-with-pinned-ca-appended", certs: [][]byte{foreign[0], control[1]}, pin: pin, want: codes.CAMismatch},
		{name: "fail/pin-is-other-ca", certs: control, pin: other.Fingerprint(), want: codes.CAMismatch},
		{name: "fail/truncated-chain", certs: control[:1], pin: pin, want: codes.CAMismatch},
		{name: "fail/empty-chain", certs: nil, pin: pin, want: codes.CAMismatch},
		{name: "fail/garbage-leaf", certs: [][]byte{[]byte("junk"), control[1]}, pin: pin, want: codes.CAMismatch},
		{name: "fail/expired", certs: control, pin: pin, now: leafExpiry.Add(time.Second), want: codes.CAMismatch},
		{name: "fail/not-yet-valid", certs: control, pin: pin, now: pkitest.Now.Add(-time.Hour), want: codes.CAMismatch},
		{name: "fail/worker-leaf", certs: worker, pin: pin, want: codes.SeedNotControl},
		{name: "fail/control-role-without-server-auth", certs: controlNoServerAuth, pin: pin, want: codes.SeedNotControl},
		{name: "fail/worker-role-with-server-auth", certs: workerServerAuth, pin: pin, want: codes.SeedNotControl},
		{name: "fail/no-role-with-server-auth", certs: noRoleServerAuth, pin: pin, want: codes.SeedNotControl},
		{name: "fail/ca-as-leaf", certs: [][]byte{control[1], control[1]}, pin: pin, want: codes.SeedNotControl},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = pkitest.Now
			}
			leaf, err := pki.VerifyPinned(tt.certs, tt.pin, now)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if leaf.Subject.CommonName != "c1" {
					t.Errorf("leaf = %q, want c1", leaf.Subject.CommonName)
				}
				return
			}
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("VerifyPinned = %v (code %q), want %s", err, got, tt.want)
			}
			if leaf != nil {
				t.Error("VerifyPinned returned a leaf with an error")
			}
		})
	}
}

func TestRoleOfAndNodeIDOf(t *testing.T) {
	u := func(s string) *url.URL { v, _ := url.Parse(s); return v }
	tests := []struct {
		name     string
		ou       []string
		uris     []*url.URL
		wantRole pki.Role
		wantID   string
	}{
		{name: "ok/control", ou: []string{"control"}, uris: []*url.URL{u("meshd://node/abc")}, wantRole: pki.RoleControl, wantID: "abc"},
		{name: "ok/worker-other-uri-first", ou: []string{"worker"}, uris: []*url.URL{u("spiffe://x/y"), u("meshd://node/n2")}, wantRole: pki.RoleWorker, wantID: "n2"},
		{name: "fail/no-role", ou: nil},
		{name: "fail/two-roles", ou: []string{"control", "worker"}},
		{name: "fail/unknown-role", ou: []string{"admin"}},
		{name: "fail/bad-uri", ou: []string{"worker"}, uris: []*url.URL{u("meshd://other/abc"), u("meshd://node/")}, wantRole: pki.RoleWorker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &x509.Certificate{Subject: pkix.Name{CommonName: "n", OrganizationalUnit: tt.ou}, URIs: tt.uris}
			role, err := pki.RoleOf(c)
			if tt.wantRole == "" {
				if codes.Of(err) != codes.BadRole {
					t.Errorf("RoleOf = %q, %v; want %s", role, err, codes.BadRole)
				}
			} else if err != nil || role != tt.wantRole {
				t.Errorf("RoleOf = %q, %v; want %q", role, err, tt.wantRole)
			}
			if got := pki.NodeIDOf(c); got != tt.wantID {
				t.Errorf("NodeIDOf = %q, want %q", got, tt.wantID)
			}
		})
	}
}
