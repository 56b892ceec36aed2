package pkitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
)

// CraftLeaf issues a TLS leaf that pki.CA.SignTLS would never issue: signed
// by ca's key at Now, valid from Now-pki.LeafBackdate for an hour, with
// Subject CommonName name, OrganizationalUnit role (none if role is "") and
// exactly the given ExtKeyUsages. It returns the chain as a server sends it:
// leaf DER, then ca's DER. Use it to test that verifiers check role and
// usage separately (a control role without server auth, a worker role with
// it).
//
// pki keeps its CA key private, so CraftLeaf reads it back the way LoadCA
// would: it saves ca to a temporary directory and parses ca.key.
func CraftLeaf(t testing.TB, ca *pki.CA, name string, role pki.Role, usages ...x509.ExtKeyUsage) [][]byte {
	t.Helper()
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatalf("pkitest: save CA: %v", err)
	}
	keyPEM, err := pki.ReadKeyFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatalf("pkitest: read CA key: %v", err)
	}
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		t.Fatal("pkitest: CA key is not PEM")
	}
	caKey, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatalf("pkitest: parse CA key: %v", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("pkitest: generate leaf key: %v", err)
	}
	subject := pkix.Name{CommonName: name, Organization: []string{"meshd"}}
	if role != "" {
		subject.OrganizationalUnit = []string{string(role)}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(Now.UnixNano()),
		Subject:               subject,
		DNSNames:              []string{name},
		NotBefore:             Now.Add(-pki.LeafBackdate),
		NotAfter:              Now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert(), leafKey.Public(), caKey)
	if err != nil {
		t.Fatalf("pkitest: sign crafted leaf: %v", err)
	}
	return [][]byte{der, ca.Cert().Raw}
}
