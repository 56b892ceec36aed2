package pki

import (
	"crypto/x509"
	"fmt"

	"github.com/meshd/meshd/codes"
)

// CSRPublicKey checks a joiner's PKCS#10 CSR the way SignTLS will (it
// parses, its signature verifies, its key is of a type a leaf may certify)
// and returns the key as PKIX DER: the form the cluster records as the
// node's TLS public key. Any fault is codes.EnrollRejected.
func CSRPublicKey(csrDER []byte) ([]byte, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("parse CSR: %w", err))
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("CSR signature: %w", err))
	}
	if err := checkLeafKey(csr.PublicKey); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("CSR: %w", err))
	}
	der, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("CSR public key: %w", err))
	}
	return der, nil
}
