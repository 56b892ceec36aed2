// Package pkitest builds certificate authorities and node identities for
// tests, on a fixed clock, so that a certificate's validity comes from its
// issuer and never from the wall clock.
//
// Import rule: pkitest imports pki and codes only, and only tests import it.
package pkitest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
)

// Now is the fixed instant test CAs and identities are issued at.
var Now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Overlay is the overlay network of test CAs.
var Overlay = netip.MustParsePrefix("10.42.0.0/16")

// Clock returns a clock stuck at Now.
func Clock() func() time.Time { return func() time.Time { return Now } }

// NewCA creates a CA for cluster at Now over Overlay.
func NewCA(t testing.TB, cluster string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(cluster, Overlay, Now)
	if err != nil {
		t.Fatalf("pkitest: new CA: %v", err)
	}
	return ca
}

// IP returns the overlay address 10.42.0.n/16.
func IP(n byte) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, 0, n}), Overlay.Bits())
}

// NewIdentity issues a complete identity for a node called name with the
// given role, signed by ca at Now: keys generated here, a TLS leaf with
// node id "id-<name>" (a control leaf also names 127.0.0.1) and a Nebula
// host certificate for overlayIP.
func NewIdentity(t testing.TB, ca *pki.CA, name string, role pki.Role, overlayIP netip.Prefix) *pki.Identity {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatalf("pkitest: new keys: %v", err)
	}
	var ips []netip.Addr
	if role == pki.RoleControl {
		ips = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	leaf, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: name, NodeID: "id-" + name, Role: role, IPs: ips}, Now)
	if err != nil {
		t.Fatalf("pkitest: sign TLS leaf: %v", err)
	}
	host, err := ca.SignNebula(pki.NebulaRequest{
		PublicKey: keys.NebulaPublicPEM, Name: name, IP: overlayIP, Groups: []string{string(role)},
	}, Now)
	if err != nil {
		t.Fatalf("pkitest: sign Nebula certificate: %v", err)
	}
	return &pki.Identity{
		CACert:       ca.CertPEM(),
		Cert:         leaf,
		Key:          keys.TLSKeyPEM,
		NebulaCACert: ca.NebulaCertPEM(),
		NebulaCert:   host,
		NebulaKey:    keys.NebulaKeyPEM,
	}
}
