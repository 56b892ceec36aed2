package pki

import (
	"fmt"
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
