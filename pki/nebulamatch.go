package pki

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/slackhq/nebula/cert"
)

// NebulaCertFor checks that the PEM Nebula host certificate certPEM
// certifies the public key pubPEM (as cert.MarshalPublicKeyToPEM writes
// it) for name at the overlay address ip (and ip6, when valid: a
// dual-stack certificate), and nothing else: what a control node checks
// before it records a certificate the CA holder signed.
func NebulaCertFor(certPEM, pubPEM []byte, name string, ip, ip6 netip.Prefix) error {
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return fmt.Errorf("parse Nebula certificate: %w", err)
	}
	pub, _, curve, err := cert.UnmarshalPublicKeyFromPEM(pubPEM)
	if err != nil {
		return fmt.Errorf("parse Nebula public key: %w", err)
	}
	if c.Curve() != curve || !bytes.Equal(c.PublicKey(), pub) {
		return errors.New("the Nebula certificate is for another key")
	}
	if c.Name() != name {
		return fmt.Errorf("the Nebula certificate names %q, want %q", c.Name(), name)
	}
	want := []netip.Prefix{ip}
	if ip6.IsValid() {
		want = append(want, ip6)
	}
	if nets := c.Networks(); !slices.Equal(nets, want) {
		return fmt.Errorf("the Nebula certificate is for %v, want %v", nets, want)
	}
	return nil
}
