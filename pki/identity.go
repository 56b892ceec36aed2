package pki

import (
	"bytes"
	"crypto/tls"
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

// Layout of an identity directory.
const (
	identityMarker = "identity.ok"
	tlsDir         = "tls"
	nebulaDir      = "nebula"
)

var identityFiles = []struct {
	path  string
	key   bool
	get   func(*Identity) *[]byte
	check func([]byte) error // parses the file alone, so a corrupt one is named
}{
	{filepath.Join(tlsDir, "node.key"), true, func(id *Identity) *[]byte { return &id.Key }, checkECKeyPEM},
	{filepath.Join(nebulaDir, "host.key"), true, func(id *Identity) *[]byte { return &id.NebulaKey }, checkNebulaKeyPEM},
	{filepath.Join(tlsDir, "ca.crt"), false, func(id *Identity) *[]byte { return &id.CACert }, checkCertsPEM},
	{filepath.Join(tlsDir, "node.crt"), false, func(id *Identity) *[]byte { return &id.Cert }, checkCertsPEM},
	{filepath.Join(nebulaDir, "ca.crt"), false, func(id *Identity) *[]byte { return &id.NebulaCACert }, checkNebulaCertsPEM},
	{filepath.Join(nebulaDir, "host.crt"), false, func(id *Identity) *[]byte { return &id.NebulaCert }, checkNebulaCertsPEM},
}

func checkECKeyPEM(b []byte) error {
	_, err := parseECKeyPEM(b)
	return err
}

// checkCertsPEM: every block is a certificate that parses, and nothing
// but whitespace is left over (a truncated file leaves a partial block).
func checkCertsPEM(b []byte) error {
	n := 0
	for {
		blk, rest := pem.Decode(b)
		if blk == nil {
			break
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
		b = rest
	}
	if n == 0 {
		return errors.New("no PEM CERTIFICATE block")
	}
	if len(bytes.TrimSpace(b)) != 0 {
		return fmt.Errorf("trailing data after certificate %d that is not PEM", n)
	}
	return nil
}

func checkNebulaCertsPEM(b []byte) error {
	n := 0
	for len(bytes.TrimSpace(b)) != 0 {
		_, rest, err := cert.UnmarshalCertificateFromPEM(b)
		if err != nil {
			return fmt.Errorf("Nebula certificate %d: %w", n+1, err)
		}
		n++
		b = rest
	}
	if n == 0 {
		return errors.New("no Nebula certificate")
	}
	return nil
}

func checkNebulaKeyPEM(b []byte) error {
	_, rest, _, err := cert.UnmarshalPrivateKeyFromPEM(b)
	if err != nil {
		return errors.New("malformed Nebula private key") // never the key's bytes
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return errors.New("trailing data after the Nebula private key")
	}
	return nil
}

// Identity is a node's local identity: its TLS leaf and key with the
// cluster CA, and its Nebula host certificate and key with the Nebula CA.
// All fields are PEM. String, GoString, Format and LogValue never show the
// keys.
type Identity struct {
	CACert       []byte // cluster CA certificate(s); the first is the current one
	Cert         []byte // TLS leaf
	Key          []byte // TLS private key
	NebulaCACert []byte
	NebulaCert   []byte
	NebulaKey    []byte
}

// Save writes the identity under dir: tls/ca.crt, tls/node.crt (0644),
// tls/node.key (0600), nebula/ca.crt, nebula/host.crt (0644),
// nebula/host.key (0600), each atomically. The marker dir/identity.ok is
// removed first and written last, so a save that dies half way leaves an
// identity that HasIdentity and LoadIdentity treat as absent.
func (id *Identity) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, identityMarker)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("save identity: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	for _, f := range identityFiles {
		data := *f.get(id)
		if len(data) == 0 {
			return fmt.Errorf("save identity: %s is empty", f.path)
		}
		perm := fs.FileMode(0o644)
		if f.key {
			perm = 0o600
		}
		if err := WriteFileAtomic(filepath.Join(dir, f.path), data, perm); err != nil {
			return fmt.Errorf("save identity: %w", err)
		}
	}
	if err := WriteFileAtomic(filepath.Join(dir, identityMarker), []byte("meshd identity v1\n"), 0o644); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	return nil
}

// LoadIdentity reads an identity saved by Save. Without the marker it
// fails with an error wrapping fs.ErrNotExist; keys are read with
// ReadKeyFile (codes.KeyPermissions when group- or world-accessible). The
// TLS leaf must match its key.
func LoadIdentity(dir string) (*Identity, error) {
	if !HasIdentity(dir) {
		return nil, fmt.Errorf("load identity: no complete identity in %s: %w", dir, fs.ErrNotExist)
	}
	id := &Identity{}
	for _, f := range identityFiles {
		p := filepath.Join(dir, f.path)
		var data []byte
		var err error
		if f.key {
			data, err = ReadKeyFile(p)
		} else {
			data, err = os.ReadFile(p)
		}
		if err != nil {
			return nil, fmt.Errorf("load identity: %w", err)
		}
		if err := f.check(data); err != nil {
			return nil, fmt.Errorf("load identity: %s: %w", p, err)
		}
		*f.get(id) = data
	}
	if _, err := id.TLSCertificate(); err != nil {
		return nil, fmt.Errorf("load identity: %w", err)
	}
	return id, nil
}

// HasIdentity reports whether dir holds a completely saved identity.
func HasIdentity(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, identityMarker))
	return err == nil && st.Mode().IsRegular()
}

// RemoveIdentity deletes the identity under dir, marker first, so that an
// interrupted removal is never mistaken for an identity. Other contents of
// dir are left alone. Removing an absent identity is not an error.
func RemoveIdentity(dir string) error {
	if err := os.Remove(filepath.Join(dir, identityMarker)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove identity: %w", err)
	}
	if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove identity: %w", err)
	}
	for _, sub := range []string{tlsDir, nebulaDir} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return fmt.Errorf("remove identity: %w", err)
		}
	}
	return nil
}

// Leaf parses the TLS leaf.
func (id *Identity) Leaf() (*x509.Certificate, error) {
	c, err := ParseCertPEM(id.Cert)
	if err != nil {
		return nil, fmt.Errorf("identity leaf: %w", err)
	}
	return c, nil
}

// caCert parses the current cluster CA certificate.
func (id *Identity) caCert() (*x509.Certificate, error) {
	c, err := ParseCertPEM(id.CACert)
	if err != nil {
		return nil, fmt.Errorf("identity CA: %w", err)
	}
	return c, nil
}

// CAPool returns a pool holding the identity's cluster CA certificate(s).
func (id *Identity) CAPool() (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(id.CACert) {
		return nil, errors.New("identity CA: no certificate")
	}
	return pool, nil
}

// TLSCertificate returns the leaf and its key with the chain leaf, CA (the
// CA of the bundle that issued the leaf), so
// that a peer can pin the CA by its fingerprint.
func (id *Identity) TLSCertificate() (tls.Certificate, error) {
	tc, err := tls.X509KeyPair(id.Cert, id.Key)
	if err != nil {
		// tls.X509KeyPair's errors describe the mismatch, not the key.
		return tls.Certificate{}, fmt.Errorf("identity key pair: %w", err)
	}
	ca, err := id.caCert()
	if err != nil {
		return tls.Certificate{}, err
	}
	if leaf, err := id.Leaf(); err == nil {
		if issuer := IssuerIn(id.CACert, leaf); issuer != nil {
			ca = issuer // during a CA rotation: the CA of the bundle that signed the leaf
		}
	}
	tc.Certificate = append(tc.Certificate[:1:1], ca.Raw)
	return tc, nil
}

// CAFingerprint is the SHA-256 of the identity's current cluster CA.
func (id *Identity) CAFingerprint() (Fingerprint, error) {
	ca, err := id.caCert()
	if err != nil {
		return Fingerprint{}, err
	}
	return FingerprintOf(ca), nil
}

// String names the leaf, never a key.
func (id Identity) String() string {
	leaf, err := id.Leaf()
	if err != nil {
		return fmt.Sprintf("pki.Identity{key:%s nebula_key:%s}", redacted(id.Key), redacted(id.NebulaKey))
	}
	role, _ := RoleOf(leaf)
	return fmt.Sprintf("pki.Identity{%s role=%s node=%s key:%s nebula_key:%s}",
		leaf.Subject.CommonName, role, NodeIDOf(leaf), redacted(id.Key), redacted(id.NebulaKey))
}

// GoString is String, so %#v shows no key either.
func (id Identity) GoString() string { return id.String() }

// Format prints String for every verb, so no verb can reach the keys.
func (id Identity) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(id.String())) }

// LogValue logs the leaf's name, role, node id and expiry, never a key.
func (id Identity) LogValue() slog.Value {
	leaf, err := id.Leaf()
	if err != nil {
		return slog.StringValue("pki.Identity{}")
	}
	role, _ := RoleOf(leaf)
	return slog.GroupValue(
		slog.String("name", leaf.Subject.CommonName),
		slog.String("role", string(role)),
		slog.String("node_id", NodeIDOf(leaf)),
		slog.Time("not_after", leaf.NotAfter),
	)
}
