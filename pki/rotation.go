package pki

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/trust"
)

// The CA rotation helpers (issue 13): during a rotation every node trusts
// a bundle of two CAs, the current one first, and a node tells which CA
// issued each of its certificates.

// Bundle joins PEM certificate lists into one, each ending in a newline;
// empty parts are skipped.
func Bundle(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		p = bytes.TrimSpace(p)
		if len(p) == 0 {
			continue
		}
		b = append(b, p...)
		b = append(b, '\n')
	}
	return b
}

// IssuerIn returns the CA of bundle whose key signed leaf, or nil.
func IssuerIn(bundle []byte, leaf *x509.Certificate) *x509.Certificate {
	cas, err := BundleCerts(bundle)
	if err != nil {
		return nil
	}
	for _, ca := range cas {
		if bytes.Equal(leaf.RawIssuer, ca.RawSubject) && leaf.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

// IssuedBy reports whether the first certificate of leafPEM is signed by
// the CA certificate caPEM.
func IssuedBy(caPEM, leafPEM []byte) bool {
	leaf, err := ParseCertPEM(leafPEM)
	if err != nil {
		return false
	}
	return IssuerIn(caPEM, leaf) != nil
}

// NebulaFingerprint is the fingerprint Nebula gives a certificate (hex
// SHA-256): for a CA, what its host certificates name as their issuer.
func NebulaFingerprint(certPEM []byte) (string, error) {
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return "", fmt.Errorf("parse Nebula certificate: %w", err)
	}
	return c.Fingerprint()
}

// NebulaIssuer is the fingerprint of the CA that signed a Nebula host
// certificate, as the certificate names it.
func NebulaIssuer(certPEM []byte) (string, error) {
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return "", fmt.Errorf("parse Nebula certificate: %w", err)
	}
	return c.Issuer(), nil
}

// NebulaIssuedBy reports whether the Nebula certificate certPEM is signed
// by the Nebula CA caPEM (its issuer names the CA and the signature
// verifies).
func NebulaIssuedBy(caPEM, certPEM []byte) bool {
	ca, _, err := cert.UnmarshalCertificateFromPEM(caPEM)
	if err != nil {
		return false
	}
	c, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		return false
	}
	fp, err := ca.Fingerprint()
	if err != nil || c.Issuer() != fp {
		return false
	}
	return c.CheckSignature(ca.PublicKey())
}

// BundleID names a pair of trust bundles (TLS, Nebula): the first 8 hex
// characters of the SHA-256 over both, length-prefixed. Nodes report it so
// a rotation can tell who trusts the next CA.
func BundleID(tlsBundle, nebulaBundle []byte) string {
	h := sha256.New()
	for _, b := range [][]byte{bytes.TrimSpace(tlsBundle), bytes.TrimSpace(nebulaBundle)} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// ShortID is the first 8 characters of a hex fingerprint ("" if shorter).
func ShortID(fp string) string {
	if len(fp) < 8 {
		return ""
	}
	return fp[:8]
}

// pinFromProtos reads the fingerprint prefix PinProto wrote.
func pinFromProtos(protos []string) (string, bool) {
	for _, p := range protos {
		s, ok := strings.CutPrefix(p, trust.PinProtoPrefix)
		if !ok || len(s) != 32 {
			continue
		}
		if _, err := hex.DecodeString(s); err == nil {
			return s, true
		}
	}
	return "", false
}

// HeldLeafFile is where a node keeps, during a CA rotation, the TLS leaf
// its reissue replaced (same key, old CA), under its identity directory:
// LiveIdentity.Hold takes it back after a restart.
const HeldLeafFile = "tls/held.crt"

// Hold adds certPEM, an earlier leaf of this identity's key issued by
// another CA of its bundle, to the leaves served to a joiner that pins
// that CA (PinProto), as Swap does for the leaf a reissue replaces. A leaf
// for another key, of a CA outside the bundle, or of the current leaf's
// CA is refused; it is dropped when its CA leaves the bundle.
func (l *LiveIdentity) Hold(certPEM []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	tc, err := tls.X509KeyPair(certPEM, l.id.Key)
	if err != nil {
		return fmt.Errorf("held leaf: %w", err)
	}
	leaf, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		return fmt.Errorf("held leaf: %w", err)
	}
	ca := IssuerIn(l.id.CACert, leaf)
	if ca == nil {
		return errors.New("held leaf: its CA is not in the bundle")
	}
	if cur := IssuerIn(l.id.CACert, l.leaf); cur != nil && FingerprintOf(cur) == FingerprintOf(ca) {
		return errors.New("held leaf: issued by the current leaf's CA")
	}
	tc.Certificate = append(tc.Certificate[:1:1], ca.Raw)
	if l.held == nil {
		l.held = map[Fingerprint]tls.Certificate{}
	}
	l.held[FingerprintOf(ca)] = tc
	return nil
}

// HeldLeaves are the PEM leaves l holds under CAs other than its current
// leaf's (for a node to save, so a restart keeps serving them).
func (l *LiveIdentity) HeldLeaves() [][]byte {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out [][]byte
	for _, c := range l.held {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
	}
	return out
}

// SaveTrustBundles replaces only the CA bundles of the identity saved
// under dir (tls/ca.crt and nebula/ca.crt), each atomically: a crash
// leaves each file old or new, both valid, and the keys, leaves and the
// marker untouched (Identity.Save would take the marker away meanwhile).
func SaveTrustBundles(dir string, tlsBundle, nebulaBundle []byte) error {
	if err := checkCertsPEM(tlsBundle); err != nil {
		return fmt.Errorf("save trust bundles: %w", err)
	}
	if err := checkNebulaCertsPEM(nebulaBundle); err != nil {
		return fmt.Errorf("save trust bundles: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, tlsDir, "ca.crt"), tlsBundle, 0o644); err != nil {
		return fmt.Errorf("save trust bundles: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, nebulaDir, "ca.crt"), nebulaBundle, 0o644); err != nil {
		return fmt.Errorf("save trust bundles: %w", err)
	}
	return nil
}
