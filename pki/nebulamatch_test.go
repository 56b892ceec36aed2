package pki_test

import (
	"net/netip"
	"testing"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestNebulaCertFor: a certificate matches only its own key, name and IP.
func TestNebulaCertFor(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	keys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: pkitest.IP(5)}, pkitest.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.NebulaCertFor(c, keys.NebulaPublicPEM, "w1", pkitest.IP(5), netip.Prefix{}); err != nil {
		t.Fatalf("its own key, name and IP: %v", err)
	}
	for name, err := range map[string]error{
		"other-key":  pki.NebulaCertFor(c, other.NebulaPublicPEM, "w1", pkitest.IP(5), netip.Prefix{}),
		"other-name": pki.NebulaCertFor(c, keys.NebulaPublicPEM, "w2", pkitest.IP(5), netip.Prefix{}),
		"other-ip":   pki.NebulaCertFor(c, keys.NebulaPublicPEM, "w1", pkitest.IP(6), netip.Prefix{}),
		"not-a-cert": pki.NebulaCertFor([]byte("x"), keys.NebulaPublicPEM, "w1", pkitest.IP(5), netip.Prefix{}),
		"not-a-key":  pki.NebulaCertFor(c, []byte("x"), "w1", pkitest.IP(5), netip.Prefix{}),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
