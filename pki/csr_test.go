package pki_test

import (
	"bytes"
	"crypto/x509"
	"slices"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestCSRPublicKey: a valid CSR yields the PKIX DER of its key, the same
// bytes as the key of the leaf SignTLS issues for it; a CSR that does not
// parse or whose signature fails is codes.EnrollRejected.
func TestCSRPublicKey(t *testing.T) {
	keys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	der, err := pki.CSRPublicKey(keys.CSR)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(keys.CSR)
	if err != nil {
		t.Fatal(err)
	}
	want, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil || !bytes.Equal(der, want) {
		t.Fatalf("CSRPublicKey = %x, want %x (%v)", der, want, err)
	}
	tampered := slices.Clone(keys.CSR)
	tampered[len(tampered)-1] ^= 1
	for name, in := range map[string][]byte{"garbage": []byte("x"), "bad-signature": tampered, "empty": nil} {
		if _, err := pki.CSRPublicKey(in); codes.Of(err) != codes.EnrollRejected {
			t.Errorf("%s: %v, want %s", name, err, codes.EnrollRejected)
		}
	}
}
