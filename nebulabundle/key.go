package nebulabundle

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/pem"
	"fmt"
)

// PEM banners of a Nebula X25519 key pair (Nebula v1.11.0 and v1.12.0 cert/pem.go,
// X25519PublicKeyBanner and X25519PrivateKeyBanner).
const (
	x25519PublicBanner  = "NEBULA X25519 PUBLIC KEY"
	x25519PrivateBanner = "NEBULA X25519 PRIVATE KEY"
)

// GenerateKey makes a Nebula host key pair, X25519, in PEM exactly as
// `nebula-cert keygen` writes it (cert.MarshalPublicKeyToPEM and
// cert.MarshalPrivateKeyToPEM with Curve_CURVE25519, as pki.NewKeys
// does): the raw 32-byte keys under Nebula's banners. It is written here
// with crypto/ecdh rather than through Nebula's cert package so that
// meshctl can call it (see the import rule); TestGenerateKey parses the
// result with the cert package. The private key is secret: write it with
// WriteDir (0600), never to a log.
func GenerateKey() (pub, priv []byte, err error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate Nebula key: %w", err)
	}
	pub = pem.EncodeToMemory(&pem.Block{Type: x25519PublicBanner, Bytes: k.PublicKey().Bytes()})
	priv = pem.EncodeToMemory(&pem.Block{Type: x25519PrivateBanner, Bytes: k.Bytes()})
	return pub, priv, nil
}
