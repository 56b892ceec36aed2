package pkitest_test

import (
	"crypto/x509"
	"net"
	"slices"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func TestNewIdentity(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	tests := []struct {
		name    string
		role    pki.Role
		wantIPs []net.IP
	}{
		{name: "ok/control-names-loopback", role: pki.RoleControl, wantIPs: []net.IP{net.IPv4(127, 0, 0, 1)}},
		{name: "ok/worker-no-ip", role: pki.RoleWorker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := pkitest.NewIdentity(t, ca, "n1", tt.role, pkitest.IP(3))
			leaf, err := id.Leaf()
			if err != nil {
				t.Fatal(err)
			}
			if role, err := pki.RoleOf(leaf); err != nil || role != tt.role {
				t.Errorf("RoleOf = %q, %v; want %q", role, err, tt.role)
			}
			if got := pki.NodeIDOf(leaf); got != "id-n1" {
				t.Errorf("NodeIDOf = %q, want id-n1", got)
			}
			if !slices.EqualFunc(leaf.IPAddresses, tt.wantIPs, net.IP.Equal) {
				t.Errorf("IP SANs = %v, want %v", leaf.IPAddresses, tt.wantIPs)
			}
			if err := pki.CheckNebulaCert(id.NebulaCACert, id.NebulaCert, id.NebulaKey, pkitest.IP(3).Addr(), pkitest.Now); err != nil {
				t.Errorf("Nebula certificate: %v", err)
			}
			fp, err := id.CAFingerprint()
			if err != nil || fp != ca.Fingerprint() {
				t.Errorf("CAFingerprint = %v, %v; want the CA's", fp, err)
			}
		})
	}
}

func TestCraftLeaf(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	tests := []struct {
		name     string
		role     pki.Role
		usages   []x509.ExtKeyUsage
		wantCode codes.Code // of RoleOf
	}{
		{name: "ok/worker-with-server-auth", role: pki.RoleWorker, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{name: "ok/control-client-only", role: pki.RoleControl, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{name: "ok/no-role", wantCode: codes.BadRole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chain := pkitest.CraftLeaf(t, ca, "n1", tt.role, tt.usages...)
			if len(chain) != 2 || !slices.Equal(chain[1], ca.Cert().Raw) {
				t.Fatal("chain is not leaf, CA")
			}
			leaf, err := x509.ParseCertificate(chain[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := leaf.CheckSignatureFrom(ca.Cert()); err != nil {
				t.Errorf("leaf not signed by the CA: %v", err)
			}
			role, err := pki.RoleOf(leaf)
			if codes.Of(err) != tt.wantCode || role != tt.role {
				t.Errorf("RoleOf = %q, %v; want %q (code %q)", role, err, tt.role, tt.wantCode)
			}
			if !slices.Equal(leaf.ExtKeyUsage, tt.usages) {
				t.Errorf("ExtKeyUsage = %v, want %v", leaf.ExtKeyUsage, tt.usages)
			}
			if !leaf.NotBefore.Equal(pkitest.Now.Add(-pki.LeafBackdate)) || !leaf.NotAfter.After(pkitest.Now) {
				t.Errorf("validity %v..%v does not hold Now", leaf.NotBefore, leaf.NotAfter)
			}
		})
	}
}
