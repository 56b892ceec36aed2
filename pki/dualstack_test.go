package pki_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestSignNebulaDualStack: a dual-stack Nebula CA is a v2 CA of both
// overlays and signs v2 host certificates holding one address of each; a
// request without the IPv6 address, with one outside the IPv6 overlay, or
// with one for an IPv4-only CA is refused; an IPv4-only CA stays v1.
func TestSignNebulaDualStack(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("fd5a:1b2c:3d4e::/64")
	ca, err := pki.NewDualStackCA("lab", v4, v6, pkitest.Now)
	if err != nil {
		t.Fatal(err)
	}
	if nets, err := pki.NebulaCANetworks(ca.NebulaCertPEM()); err != nil || !slices.Equal(nets, []netip.Prefix{v4, v6}) || !ca.DualStack() {
		t.Fatalf("CA networks %v, %v; dual-stack %v", nets, err, ca.DualStack())
	}
	keys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	ip, ip6 := netip.MustParsePrefix("10.42.0.5/16"), netip.MustParsePrefix("fd5a:1b2c:3d4e::5/64")
	crt, err := ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip, IP6: ip6}, pkitest.Now)
	if err != nil {
		t.Fatal(err)
	}
	nets, version, err := pki.NebulaCertNetworks(crt)
	if err != nil || version != cert.Version2 || !slices.Equal(nets, []netip.Prefix{ip, ip6}) {
		t.Fatalf("certificate v%d holds %v (%v), want v2 with %v %v", version, nets, err, ip, ip6)
	}
	if err := pki.NebulaCertFor(crt, keys.NebulaPublicPEM, "w1", ip, ip6); err != nil {
		t.Errorf("NebulaCertFor the record: %v", err)
	}
	if err := pki.NebulaCertFor(crt, keys.NebulaPublicPEM, "w1", ip, netip.Prefix{}); err == nil {
		t.Error("NebulaCertFor without the IPv6 address matched a dual-stack certificate")
	}
	if err := pki.CheckNebulaCert(ca.NebulaCertPEM(), crt, keys.NebulaKeyPEM, ip6.Addr(), pkitest.Now); err != nil {
		t.Errorf("CheckNebulaCert for the IPv6 address: %v", err)
	}
	for name, req := range map[string]pki.NebulaRequest{
		"no IPv6 address":        {PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip},
		"IPv6 outside":           {PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip, IP6: netip.MustParsePrefix("fd00:9::5/64")},
		"IPv6 other length":      {PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip, IP6: netip.MustParsePrefix("fd5a:1b2c:3d4e::5/80")},
		"IPv6 network address":   {PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip, IP6: v6},
		"IPv6 in the IPv4 field": {PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip6, IP6: ip6},
	} {
		if _, err := ca.SignNebula(req, pkitest.Now); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
	v1 := pkitest.NewCA(t, "lab")
	if v1.DualStack() {
		t.Fatal("an IPv4-only CA says it is dual-stack")
	}
	if _, err := v1.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip, IP6: ip6}, pkitest.Now); err == nil {
		t.Error("an IPv4-only CA signed an IPv6 address")
	}
	if crt, err := v1.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "w1", IP: ip}, pkitest.Now); err != nil {
		t.Error(err)
	} else if _, version, _ := pki.NebulaCertNetworks(crt); version != cert.Version1 {
		t.Errorf("an IPv4-only CA signed a v%d certificate", version)
	}
}
