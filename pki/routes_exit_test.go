package pki

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestExitCertHoldsNoOverlayAddress: an exit node's certificate holds
// every IPv4 address outside the overlay, and none inside it (else it
// could send as another member); NebulaRoutes reads it back as the exit
// route.
func TestExitCertHoldsNoOverlayAddress(t *testing.T) {
	overlay := netip.MustParsePrefix("10.77.0.0/16")
	out := outsideOverlay([]netip.Prefix{overlay})
	if len(out) != 16 {
		t.Fatalf("%d prefixes outside a /16, want 16: %v", len(out), out)
	}
	for _, a := range []string{"0.0.0.1", "8.8.8.8", "10.76.255.255", "10.78.0.0", "192.168.50.1", "255.255.255.255"} {
		ip := netip.MustParseAddr(a)
		if !slices.ContainsFunc(out, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			t.Errorf("%s is outside the overlay but not held", ip)
		}
	}
	for _, a := range []string{"10.77.0.0", "10.77.0.7", "10.77.255.255"} {
		ip := netip.MustParseAddr(a)
		if slices.ContainsFunc(out, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			t.Errorf("overlay address %s is held", ip)
		}
	}

	ca := testCA(t, "prod")
	keys, err := NewKeys("e1")
	if err != nil {
		t.Fatal(err)
	}
	lan := netip.MustParsePrefix("192.168.50.0/24")
	crt, err := ca.SignNebula(NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "e1", IP: netip.MustParsePrefix("10.77.0.5/16"),
		Routes: []netip.Prefix{ExitRoute(), lan}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := NebulaRoutes(crt)
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Prefix{ExitRoute(), lan}; !slices.Equal(got, want) {
		t.Errorf("NebulaRoutes %v, want %v", got, want)
	}
}
