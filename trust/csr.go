package trust

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
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
	if err := CheckLeafKey(csr.PublicKey); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("CSR: %w", err))
	}
	der, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("CSR public key: %w", err))
	}
	return der, nil
}

// CheckLeafKey accepts the key types a node may certify: ECDSA P-256 or
// P-384, or Ed25519.
func CheckLeafKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return fmt.Errorf("ECDSA curve %s is not accepted", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("public key type %T is not accepted", pub)
}
