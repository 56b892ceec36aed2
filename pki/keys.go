package pki

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"

	"github.com/slackhq/nebula/cert"
)

// Keys are a node's freshly generated private keys and the public halves
// it sends to be certified. Every private key is generated on the machine
// that uses it and never leaves it: only CSR and NebulaPublicPEM travel.
// String, GoString, Format and LogValue never show the private keys.
type Keys struct {
	TLSKeyPEM       []byte // PKCS#8 "PRIVATE KEY", ECDSA P-256
	CSR             []byte // DER PKCS#10 for TLSKeyPEM, CN = node name
	NebulaKeyPEM    []byte // Nebula X25519 private key
	NebulaPublicPEM []byte // Nebula X25519 public key
}

// NewKeys generates an ECDSA P-256 TLS key with a CSR whose CommonName is
// name, and an X25519 Nebula key pair.
func NewKeys(name string) (*Keys, error) {
	tlsKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate TLS key: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(tlsKey)
	if err != nil {
		return nil, fmt.Errorf("encode TLS key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:            pkix.Name{CommonName: name},
		SignatureAlgorithm: x509.ECDSAWithSHA256,
	}, tlsKey)
	if err != nil {
		return nil, fmt.Errorf("create CSR: %w", err)
	}
	nebKey, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate Nebula key: %w", err)
	}
	return &Keys{
		TLSKeyPEM:       pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		CSR:             csr,
		NebulaKeyPEM:    cert.MarshalPrivateKeyToPEM(cert.Curve_CURVE25519, nebKey.Bytes()),
		NebulaPublicPEM: cert.MarshalPublicKeyToPEM(cert.Curve_CURVE25519, nebKey.PublicKey().Bytes()),
	}, nil
}

// String shows which parts are present, never the keys.
func (k Keys) String() string {
	return fmt.Sprintf("pki.Keys{tls_key:%s csr:%d bytes nebula_key:%s}",
		redacted(k.TLSKeyPEM), len(k.CSR), redacted(k.NebulaKeyPEM))
}

// GoString is String, so %#v shows no key either.
func (k Keys) GoString() string { return k.String() }

// Format prints String for every verb, so no verb can reach the keys.
func (k Keys) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue logs which parts are present, never the keys.
func (k Keys) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("tls_key", redacted(k.TLSKeyPEM)),
		slog.Int("csr_bytes", len(k.CSR)),
		slog.String("nebula_key", redacted(k.NebulaKeyPEM)),
	)
}

// redacted says whether a secret is set without showing it.
func redacted(b []byte) string {
	if len(b) == 0 {
		return "[none]"
	}
	return "[redacted]"
}
