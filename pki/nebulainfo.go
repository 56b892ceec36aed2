package pki

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/slackhq/nebula/cert"
)

// NebulaCertInfo returns the fingerprint and expiry of a PEM Nebula
// certificate, for the cluster's node records.
func NebulaCertInfo(certPEM []byte) (fingerprint string, expires time.Time, err error) {
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("parse Nebula certificate: %w", err)
	}
	fp, err := c.Fingerprint()
	if err != nil {
		return "", time.Time{}, err
	}
	return fp, c.NotAfter(), nil
}

// CheckNebulaCert verifies that certPEM is a Nebula host certificate signed
// by the CA in caPEM, valid at now, for the public key of keyPEM and for the
// overlay address ip: what a node checks before it adopts a renewed cert.
func CheckNebulaCert(caPEM, certPEM, keyPEM []byte, ip netip.Addr, now time.Time) error {
	pool, err := cert.NewCAPoolFromPEM(caPEM)
	if err != nil {
		return fmt.Errorf("Nebula CA: %w", err)
	}
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return fmt.Errorf("parse Nebula certificate: %w", err)
	}
	if _, err := pool.VerifyCertificate(now, c); err != nil {
		return fmt.Errorf("verify Nebula certificate: %w", err)
	}
	key, _, curve, err := cert.UnmarshalPrivateKeyFromPEM(keyPEM)
	if err != nil {
		return fmt.Errorf("parse Nebula key: %w", err)
	}
	if err := c.VerifyPrivateKey(curve, key); err != nil {
		return fmt.Errorf("Nebula certificate is not for this node's key: %w", err)
	}
	for _, n := range c.Networks() {
		if n.Addr() == ip {
			return nil
		}
	}
	return fmt.Errorf("Nebula certificate is not for overlay address %s", ip)
}

// LeafBackdate is how far before its signing instant a certificate from
// this CA becomes valid.
const LeafBackdate = leafBackdate

// NebulaCertValidity returns a PEM Nebula certificate's NotBefore and NotAfter.
func NebulaCertValidity(certPEM []byte) (notBefore, notAfter time.Time, err error) {
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("parse Nebula certificate: %w", err)
	}
	return c.NotBefore(), c.NotAfter(), nil
}

// NebulaCANetworks returns the networks a PEM Nebula CA certificate may
// issue addresses in, in the certificate's order (IPv4 first): one IPv4
// network for an IPv4-only cluster's v1 CA, an IPv4 and an IPv6 network
// for a dual-stack v2 CA.
func NebulaCANetworks(caPEM []byte) ([]netip.Prefix, error) {
	c, _, err := cert.UnmarshalCertificateFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("parse Nebula CA certificate: %w", err)
	}
	if !c.IsCA() {
		return nil, fmt.Errorf("Nebula certificate %s is not a CA", c.Name())
	}
	return c.Networks(), nil
}

// NebulaCertNetworks returns a PEM Nebula certificate's networks (its
// overlay addresses with their prefix length, IPv4 first) and version.
func NebulaCertNetworks(certPEM []byte) ([]netip.Prefix, cert.Version, error) {
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return nil, 0, fmt.Errorf("parse Nebula certificate: %w", err)
	}
	return c.Networks(), c.Version(), nil
}

// NebulaOverlay6 is the IPv6 overlay address, with its prefix length, of
// a PEM Nebula host certificate: a dual-stack (v2) certificate's second
// network. Invalid for an IPv4-only certificate or one that does not
// parse.
func NebulaOverlay6(certPEM []byte) netip.Prefix {
	nets, _, err := NebulaCertNetworks(certPEM)
	if err != nil {
		return netip.Prefix{}
	}
	for _, n := range nets {
		if n.Addr().Is6() {
			return n
		}
	}
	return netip.Prefix{}
}
