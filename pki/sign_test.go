package pki_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func TestSignTLSKeyTypes(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	ecKey := func(c elliptic.Curve) func() (crypto.Signer, error) {
		return func() (crypto.Signer, error) { return ecdsa.GenerateKey(c, rand.Reader) }
	}
	tests := []struct {
		name     string
		key      func() (crypto.Signer, error)
		wantCode codes.Code // "" means signed
	}{
		{name: "ok/ecdsa-p256", key: ecKey(elliptic.P256())},
		{name: "ok/ecdsa-p384", key: ecKey(elliptic.P384())},
		{name: "ok/ed25519", key: func() (crypto.Signer, error) { _, k, err := ed25519.GenerateKey(rand.Reader); return k, err }},
		{name: "fail/ecdsa-p224", key: ecKey(elliptic.P224()), wantCode: codes.EnrollRejected},
		{name: "fail/ecdsa-p521", key: ecKey(elliptic.P521()), wantCode: codes.EnrollRejected},
		{name: "fail/rsa", key: func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 1024) }, wantCode: codes.EnrollRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := tt.key()
			if err != nil {
				t.Fatal(err)
			}
			csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "n1"}}, key)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ca.SignTLS(pki.LeafRequest{CSR: csr, Name: "n1", NodeID: "abc", Role: pki.RoleWorker}, pkitest.Now)
			if tt.wantCode != "" {
				if codes.Of(err) != tt.wantCode || out != nil {
					t.Fatalf("SignTLS = %d bytes, %v; want %s", len(out), err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			leaf := parseLeaf(t, out)
			if pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(key.Public()) {
				t.Error("leaf does not certify the CSR's key")
			}
		})
	}
}
