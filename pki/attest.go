package pki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
)

// attestContext is hashed ahead of every attestation, so its signature
// serves no other purpose (a TLS handshake signs other bytes, a
// certificate is signed by a CA, never by this key).
const attestContext = "meshd member attestation v1\x00"

// Attestation kinds: what a member states about itself.
const (
	AttestKeyring = "keyring" // it runs a gossip keyring (a key rotation step)
	AttestCA      = "ca"      // it runs these trust bundles and certificates (a CA rotation)
	AttestRevoked = "revoked" // its Nebula blocks a revocation list version (a removal)
)

// attestDigest is SHA-256(context || kind || 0 || len(nonce) || nonce ||
// statement): each field framed, so no two (kind, nonce, statement)
// triples hash alike.
func attestDigest(kind string, nonce, statement []byte) []byte {
	h := sha256.New()
	h.Write([]byte(attestContext))
	h.Write([]byte(kind))
	h.Write([]byte{0})
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(nonce)))
	h.Write(n[:])
	h.Write(nonce)
	h.Write(statement)
	return h.Sum(nil)
}

// Attest signs a member's statement about itself (of kind, bound to a
// nonce the asker chose, or to the member's node id where nobody asks)
// with the key its TLS leaf certifies: a control node checks it against
// the key raft recorded at admission (VerifyAttestation), so gossip
// carries the statement but cannot forge it. Errors never include key
// material.
func (id *Identity) Attest(kind string, nonce, statement []byte) ([]byte, error) {
	k, err := parseECKeyPEM(id.Key)
	if err != nil {
		return nil, fmt.Errorf("attest: TLS key: %w", err)
	}
	sig, err := ecdsa.SignASN1(rand.Reader, k, attestDigest(kind, nonce, statement))
	if err != nil {
		return nil, fmt.Errorf("attest: %w", err)
	}
	return sig, nil
}

// VerifyAttestation checks sig over (kind, nonce, statement) against
// pubDER, the PKIX DER of the node's TLS key as raft records it.
func VerifyAttestation(pubDER []byte, kind string, nonce, statement, sig []byte) error {
	if len(pubDER) == 0 {
		return errors.New("attestation: the record holds no TLS key")
	}
	k, err := x509.ParsePKIXPublicKey(pubDER)
	if err != nil {
		return fmt.Errorf("attestation: recorded TLS key: %w", err)
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return fmt.Errorf("attestation: recorded TLS key is %T, want ECDSA", k)
	}
	if !ecdsa.VerifyASN1(pub, attestDigest(kind, nonce, statement), sig) {
		return errors.New("attestation: the signature does not verify against the recorded key")
	}
	return nil
}
