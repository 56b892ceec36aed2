package trust

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// ParseCertPEM parses the first CERTIFICATE block of b, skipping blocks
// of other types: the one PEM certificate parser of the project.
func ParseCertPEM(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM CERTIFICATE block")
		}
		if blk.Type == "CERTIFICATE" {
			return x509.ParseCertificate(blk.Bytes)
		}
	}
}

// BundleCerts parses every CERTIFICATE block of a PEM bundle.
func BundleCerts(bundle []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, bundle = pem.Decode(bundle)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		out = append(out, c)
	}
}
