package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/slackhq/nebula/cert"
)

// CABundle is a CA's certificates and private keys as PEM: what a CA
// handoff sends to the next CA holder over mTLS and what a sealed backup
// holds. Its String, Format and LogValue never show a key.
type CABundle struct {
	CertPEM       []byte `json:"ca_cert"`
	KeyPEM        []byte `json:"ca_key"`
	NebulaCertPEM []byte `json:"nebula_ca_cert"`
	NebulaKeyPEM  []byte `json:"nebula_ca_key"`
}

// String names no key.
func (b CABundle) String() string { return "pki.CABundle{REDACTED}" }

// GoString is String.
func (b CABundle) GoString() string { return b.String() }

// Format prints String for every verb.
func (b CABundle) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(b.String())) }

// LogValue logs nothing of the keys.
func (b CABundle) LogValue() slog.Value { return slog.StringValue(b.String()) }

// Bundle returns the CA's certificates and keys as PEM.
func (ca *CA) Bundle() (CABundle, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return CABundle{}, fmt.Errorf("CA bundle: %w", err)
	}
	return CABundle{
		CertPEM:       clone(ca.certPEM),
		KeyPEM:        pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		NebulaCertPEM: clone(ca.nebulaPEM),
		NebulaKeyPEM:  cert.MarshalSigningPrivateKeyToPEM(cert.Curve_CURVE25519, ca.nebulaKey),
	}, nil
}

// ParseCA builds a CA from a bundle, with the checks LoadCA makes: both
// certificates are CAs, and each key matches its certificate. Its errors
// name the part that is wrong, never key material.
func ParseCA(b CABundle) (*CA, error) {
	return parseCA(b.CertPEM, b.KeyPEM, b.NebulaCertPEM, b.NebulaKeyPEM)
}

// NebulaFingerprint is the Nebula CA certificate's fingerprint (hex
// SHA-256 as Nebula computes it).
func (ca *CA) NebulaFingerprint() (string, error) { return ca.nebula.Fingerprint() }

// caMarkerFile, in a CA directory a handoff or restore wrote, names the
// node that held the CA when the keys were written (see ReadCAMarker).
const caMarkerFile = "received-from"

// SaveCADir writes ca into dir as a whole: into a sibling directory
// first (every file fsynced, keys 0600), which then replaces dir with a
// rename, so a crash leaves either the old dir or the new one, never a
// mix. from, if not empty, is recorded as the dir's marker (ReadCAMarker).
func SaveCADir(dir string, ca *CA, from string) error { return SaveCAKeys(dir, ca, nil, from) }

// SaveCAKeys is SaveCADir with the next CA of a rotation, if next is not
// nil, under dir/next/ (CANextDir), written in the same rename: a copy
// never holds one CA of a rotation without the other.
func SaveCAKeys(dir string, ca, next *CA, from string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-*")
	if err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; a failure leaves nothing
	if err := ca.Save(tmp); err != nil {
		return err
	}
	if next != nil {
		if err := next.Save(filepath.Join(tmp, CANextDir)); err != nil {
			return err
		}
	}
	if from != "" {
		if err := WriteFileAtomic(filepath.Join(tmp, caMarkerFile), []byte(from+"\n"), 0o600); err != nil {
			return fmt.Errorf("save CA: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	if _, err := os.Stat(dir); err == nil {
		// A directory cannot be renamed over a non-empty one: move the old
		// one aside first. Only a copy of the same CA is ever replaced
		// (the callers check the fingerprint against the cluster's).
		old := tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("save CA: %w", err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	return syncDir(parent)
}

// ReadCAMarker returns the node a CA directory's keys came from (written
// by SaveCADir), "" when the dir has no marker (the origin's, or one whose
// holder cleared it).
func ReadCAMarker(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, caMarkerFile))
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// ClearCAMarker removes a CA directory's marker: the node now holds the
// CA on record.
func ClearCAMarker(dir string) error {
	err := os.Remove(filepath.Join(dir, caMarkerFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// RemoveCADir deletes a CA directory, and whatever SaveCADir left beside
// it, and makes the removal durable. The directory is first renamed
// aside in one step, so nobody (a restart after a crash, a reader) ever
// sees dir with some of its keys gone; a copy killed before the delete
// is a leftover RemoveCADirLeftovers finds.
func RemoveCADir(dir string) error {
	aside, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".new-*")
	if err != nil {
		return fmt.Errorf("remove CA: %w", err)
	}
	switch err := os.Rename(dir, filepath.Join(aside, "gone")); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("remove CA: %w", err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := RemoveCADirLeftovers(dir); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// RemoveCADirLeftovers deletes the sibling directories a SaveCADir of dir
// that was killed half way left (".ca.new-*", which may hold keys).
func RemoveCADirLeftovers(dir string) error {
	left, err := filepath.Glob(filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".new-*"))
	if err != nil {
		return fmt.Errorf("CA leftovers: %w", err)
	}
	for _, l := range left {
		if err := os.RemoveAll(l); err != nil {
			return fmt.Errorf("CA leftovers: %w", err)
		}
	}
	return nil
}

// probeContext is hashed with a custody probe's nonce, so the signature
// can serve no other purpose.
const probeContext = "meshd CA custody probe v1\x00"

// ProbeNonceSize is the length of a custody probe's nonce.
const ProbeNonceSize = 32

// Probe proves a node holds working CA keys: both CA keys' signatures
// over the digest SHA-256(context || nonce) of a nonce the verifier
// chose. Only the digest is ever signed, never bytes the asker chose:
// the Nebula CA signs certificates as the raw bytes of their details, so
// signing context || nonce would let whoever picks the nonce shape those
// bytes; a certificate's X.509 signature is over SHA-256 of its TBS
// encoding, which the context keeps apart.
type Probe struct {
	X509   []byte `json:"x509"`   // ECDSA ASN.1 signature over the digest
	Nebula []byte `json:"nebula"` // Ed25519 signature over the digest
}

func probeDigest(nonce []byte) ([]byte, error) {
	if len(nonce) != ProbeNonceSize {
		return nil, fmt.Errorf("probe nonce: %d bytes, want %d", len(nonce), ProbeNonceSize)
	}
	sum := sha256.Sum256(append([]byte(probeContext), nonce...))
	return sum[:], nil
}

// SignProbe signs the digest of nonce (ProbeNonceSize bytes) with both CA
// keys.
func (ca *CA) SignProbe(nonce []byte) (Probe, error) {
	d, err := probeDigest(nonce)
	if err != nil {
		return Probe{}, err
	}
	sig, err := ecdsa.SignASN1(rand.Reader, ca.key, d)
	if err != nil {
		return Probe{}, fmt.Errorf("sign probe: %w", err)
	}
	return Probe{X509: sig, Nebula: ed25519.Sign(ca.nebulaKey, d)}, nil
}

// VerifyProbe checks p against the CA certificates (PEM, as raft records
// them) for nonce: both signatures must verify.
func VerifyProbe(caCertPEM, nebulaCACertPEM, nonce []byte, p Probe) error {
	d, err := probeDigest(nonce)
	if err != nil {
		return fmt.Errorf("verify probe: %w", err)
	}
	c, err := ParseCertPEM(caCertPEM)
	if err != nil {
		return fmt.Errorf("verify probe: CA certificate: %w", err)
	}
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return errors.New("verify probe: the CA key is not ECDSA")
	}
	if !ecdsa.VerifyASN1(pub, d, p.X509) {
		return errors.New("verify probe: the X.509 CA signature does not verify")
	}
	neb, _, err := cert.UnmarshalCertificateFromPEM(nebulaCACertPEM)
	if err != nil {
		return fmt.Errorf("verify probe: Nebula CA certificate: %w", err)
	}
	if npub := neb.PublicKey(); len(npub) != ed25519.PublicKeySize || !ed25519.Verify(ed25519.PublicKey(npub), d, p.Nebula) {
		return errors.New("verify probe: the Nebula CA signature does not verify")
	}
	return nil
}
