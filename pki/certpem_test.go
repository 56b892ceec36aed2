package pki_test

import (
	"bytes"
	"encoding/pem"
	"testing"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestParseCertPEM: the first CERTIFICATE block wins, other blocks before
// it are skipped; no certificate, or a broken one, is an error.
func TestParseCertPEM(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not a key")})
	other := pkitest.NewCA(t, "beta")
	bundle := bytes.Join([][]byte{key, ca.CertPEM(), other.CertPEM()}, nil)
	c, err := pki.ParseCertPEM(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if pki.FingerprintOf(c) != ca.Fingerprint() {
		t.Fatal("parsed a certificate other than the first one")
	}
	for name, in := range map[string][]byte{
		"empty":      nil,
		"only a key": key,
		"not PEM":    []byte("hello"),
		"broken DER": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x01}}),
	} {
		if _, err := pki.ParseCertPEM(in); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
