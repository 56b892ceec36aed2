package pki_test

import (
	"testing"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestAttestation: a statement verifies against the key the signer's
// leaf certifies, and against nothing else: another node's key, another
// kind, nonce or statement, a truncated signature.
func TestAttestation(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	other := pkitest.NewIdentity(t, ca, "n2", pki.RoleWorker, pkitest.IP(6))
	pub, err := pki.PublicKeyDER(id.Cert)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _ := pki.PublicKeyDER(other.Cert)
	nonce, stmt := []byte("nonce-1"), []byte("kr-abc")
	sig, err := id.Attest(pki.AttestKeyring, nonce, stmt)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.VerifyAttestation(pub, pki.AttestKeyring, nonce, stmt, sig); err != nil {
		t.Fatalf("own key: %v", err)
	}
	for name, v := range map[string]func() error{
		"another node's key": func() error { return pki.VerifyAttestation(otherPub, pki.AttestKeyring, nonce, stmt, sig) },
		"another kind":       func() error { return pki.VerifyAttestation(pub, pki.AttestCA, nonce, stmt, sig) },
		"another nonce":      func() error { return pki.VerifyAttestation(pub, pki.AttestKeyring, []byte("nonce-2"), stmt, sig) },
		"another statement":  func() error { return pki.VerifyAttestation(pub, pki.AttestKeyring, nonce, []byte("kr-abd"), sig) },
		"nonce/statement shifted": func() error {
			return pki.VerifyAttestation(pub, pki.AttestKeyring, []byte("nonce-1k"), []byte("r-abc"), sig)
		},
		"truncated signature": func() error { return pki.VerifyAttestation(pub, pki.AttestKeyring, nonce, stmt, sig[:len(sig)-1]) },
		"no recorded key":     func() error { return pki.VerifyAttestation(nil, pki.AttestKeyring, nonce, stmt, sig) },
		"garbage key":         func() error { return pki.VerifyAttestation([]byte("x"), pki.AttestKeyring, nonce, stmt, sig) },
	} {
		if v() == nil {
			t.Errorf("%s: verified", name)
		}
	}
}
