package nebulabundle

import (
	"bytes"
	"crypto/ecdh"
	"testing"

	"github.com/slackhq/nebula/cert"
)

// TestGenerateKey: both halves parse with Nebula's cert package as an
// X25519 pair, are byte for byte what its Marshal functions (and so
// nebula-cert keygen and pki.NewKeys) write, and belong together; two
// calls give two keys. That stock Nebula runs with such a key is
// TestStockNebulaAcceptsBundle.
func TestGenerateKey(t *testing.T) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	rawPub, rest, curve, err := cert.UnmarshalPublicKeyFromPEM(pub)
	if err != nil || len(rest) != 0 || curve != cert.Curve_CURVE25519 {
		t.Fatalf("public key: curve %v, %d bytes left, err %v", curve, len(rest), err)
	}
	rawPriv, rest, curve, err := cert.UnmarshalPrivateKeyFromPEM(priv)
	if err != nil || len(rest) != 0 || curve != cert.Curve_CURVE25519 {
		t.Fatalf("private key: curve %v, %d bytes left, err %v", curve, len(rest), err)
	}
	if got := cert.MarshalPublicKeyToPEM(cert.Curve_CURVE25519, rawPub); !bytes.Equal(got, pub) {
		t.Errorf("public key PEM differs from cert.MarshalPublicKeyToPEM's:\n%s\n%s", pub, got)
	}
	if got := cert.MarshalPrivateKeyToPEM(cert.Curve_CURVE25519, rawPriv); !bytes.Equal(got, priv) {
		t.Error("private key PEM differs from cert.MarshalPrivateKeyToPEM's")
	}
	k, err := ecdh.X25519().NewPrivateKey(rawPriv)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.PublicKey().Bytes(), rawPub) {
		t.Error("the public key is not the private key's")
	}
	pub2, _, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(pub, pub2) {
		t.Error("two calls gave the same key")
	}
}
