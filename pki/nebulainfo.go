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
