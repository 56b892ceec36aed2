package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/slackhq/nebula/cert"
)

// File names of a CA directory (see LoadCA and CA.Save).
const (
	caCertFile       = "ca.crt"
	caKeyFile        = "ca.key"
	nebulaCACertFile = "nebula-ca.crt"
	nebulaCAKeyFile  = "nebula-ca.key"
)

// caBackdate is how far before "now" a new CA becomes valid, so that nodes
// whose clocks lag a little still accept it.
const caBackdate = time.Hour

// CA is the cluster's certificate authority: an X.509 CA (ECDSA P-256) that
// signs role-bearing TLS leaves and a Nebula CA (Curve25519) that signs
// Nebula host certificates. Only the CA holder has one. Its String and
// LogValue name the CA and never reveal a key.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	nebula    cert.Certificate
	nebulaPEM []byte
	nebulaKey ed25519.PrivateKey
}

// NewCA creates both CAs for a new cluster. They are valid from an hour
// before now until now+DefaultCALifetime; the Nebula CA may issue host
// addresses inside overlay only. An IPv4 overlay gets a v1 Nebula CA (an
// IPv4-only cluster, as every cluster was before issue 34); an IPv6 one a
// v2 CA.
func NewCA(clusterName string, overlay netip.Prefix, now time.Time) (*CA, error) {
	return newCA(clusterName, []netip.Prefix{overlay}, now)
}

// NewDualStackCA is NewCA for a dual-stack overlay: the Nebula CA is a v2
// CA whose networks are overlay4 (IPv4) and overlay6 (IPv6), and its host
// certificates carry one address of each (NebulaRequest.IP and IP6).
func NewDualStackCA(clusterName string, overlay4, overlay6 netip.Prefix, now time.Time) (*CA, error) {
	if !overlay4.Addr().Is4() || !overlay6.Addr().Is6() || overlay6.Addr().Is4In6() {
		return nil, fmt.Errorf("new CA: want an IPv4 and an IPv6 overlay, got %v and %v", overlay4, overlay6)
	}
	return newCA(clusterName, []netip.Prefix{overlay4, overlay6}, now)
}

func newCA(clusterName string, overlays []netip.Prefix, now time.Time) (*CA, error) {
	if clusterName == "" {
		return nil, errors.New("new CA: empty cluster name")
	}
	for i, overlay := range overlays {
		if !overlay.IsValid() {
			return nil, fmt.Errorf("new CA: invalid overlay prefix %v", overlay)
		}
		overlays[i] = overlay.Masked()
	}
	notBefore := now.Add(-caBackdate).UTC().Truncate(time.Second)
	notAfter := now.Add(DefaultCALifetime).UTC().Truncate(time.Second)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new CA: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   "meshd CA " + clusterName,
			Organization: []string{"meshd"},
		},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // leaves only: no intermediate CA can chain to it
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("new CA: sign: %w", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}

	nebPub, nebKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new Nebula CA: generate key: %w", err)
	}
	version := cert.Version1
	if len(overlays) > 1 || !overlays[0].Addr().Is4() {
		version = cert.Version2 // v1 certificates hold one IPv4 network
	}
	tbs := &cert.TBSCertificate{
		Version:   version,
		Name:      clusterName,
		Networks:  overlays,
		IsCA:      true,
		NotBefore: notBefore,
		NotAfter:  notAfter,
		PublicKey: nebPub,
		Curve:     cert.Curve_CURVE25519,
	}
	neb, err := tbs.Sign(nil, cert.Curve_CURVE25519, nebKey)
	if err != nil {
		return nil, fmt.Errorf("new Nebula CA: sign: %w", err)
	}
	nebPEM, err := neb.MarshalPEM()
	if err != nil {
		return nil, fmt.Errorf("new Nebula CA: %w", err)
	}
	return &CA{
		cert:      c,
		certPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:       key,
		nebula:    neb,
		nebulaPEM: nebPEM,
		nebulaKey: nebKey,
	}, nil
}

// LoadCA reads a CA saved by Save from dir: ca.crt, ca.key, nebula-ca.crt
// and nebula-ca.key. Key files are read with ReadKeyFile, so a group- or
// world-accessible key is refused with codes.KeyPermissions.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	keyPEM, err := ReadKeyFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	nebPEM, err := os.ReadFile(filepath.Join(dir, nebulaCACertFile))
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	nebKeyPEM, err := ReadKeyFile(filepath.Join(dir, nebulaCAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	ca, err := parseCA(certPEM, keyPEM, nebPEM, nebKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	return ca, nil
}

// parseCA builds a CA from its PEM parts: both certificates must be CAs
// and each key must match its certificate. Errors name the file the part
// is stored in, never key material.
func parseCA(certPEM, keyPEM, nebPEM, nebKeyPEM []byte) (*CA, error) {
	c, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	if !c.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", caCertFile)
	}
	key, err := parseECKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	if !key.PublicKey.Equal(c.PublicKey) {
		return nil, fmt.Errorf("%s does not match %s", caKeyFile, caCertFile)
	}

	neb, _, err := cert.UnmarshalCertificateFromPEM(nebPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nebulaCACertFile, err)
	}
	if !neb.IsCA() || neb.Curve() != cert.Curve_CURVE25519 {
		return nil, fmt.Errorf("%s is not a Curve25519 Nebula CA", nebulaCACertFile)
	}
	nebKey, _, curve, err := cert.UnmarshalSigningPrivateKeyFromPEM(nebKeyPEM)
	if err != nil {
		// The Nebula parser's messages describe the banner, not the key.
		return nil, fmt.Errorf("%s: %w", nebulaCAKeyFile, err)
	}
	if err := neb.VerifyPrivateKey(curve, nebKey); err != nil {
		return nil, fmt.Errorf("%s does not match %s: %w", nebulaCAKeyFile, nebulaCACertFile, err)
	}
	return &CA{
		cert:      c,
		certPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}),
		key:       key,
		nebula:    neb,
		nebulaPEM: nebPEM,
		nebulaKey: ed25519.PrivateKey(nebKey),
	}, nil
}

// Save writes the CA to dir (created 0700 if missing), each file
// atomically: certificates 0644, keys 0600.
func (ca *CA) Save(dir string) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	files := []struct {
		name string
		data []byte
		perm fs.FileMode
	}{
		{caKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{nebulaCAKeyFile, cert.MarshalSigningPrivateKeyToPEM(cert.Curve_CURVE25519, ca.nebulaKey), 0o600},
		{caCertFile, ca.certPEM, 0o644},
		{nebulaCACertFile, ca.nebulaPEM, 0o644},
	}
	for _, f := range files {
		if err := WriteFileAtomic(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return fmt.Errorf("save CA: %w", err)
		}
	}
	return nil
}

// Cert returns the cluster CA certificate.
func (ca *CA) Cert() *x509.Certificate { return ca.cert }

// CertPEM returns the cluster CA certificate as PEM.
func (ca *CA) CertPEM() []byte { return clone(ca.certPEM) }

// NebulaCertPEM returns the Nebula CA certificate as PEM.
func (ca *CA) NebulaCertPEM() []byte { return clone(ca.nebulaPEM) }

// Fingerprint is the SHA-256 of the cluster CA certificate: what join
// tokens pin.
func (ca *CA) Fingerprint() Fingerprint { return FingerprintOf(ca.cert) }

// String names the CA by its subject and fingerprint; it never shows a key.
func (ca *CA) String() string {
	if ca == nil || ca.cert == nil {
		return "pki.CA{}"
	}
	return fmt.Sprintf("pki.CA{%s sha256:%s}", ca.cert.Subject.CommonName, ca.Fingerprint())
}

// GoString is String, so %#v shows no key either.
func (ca *CA) GoString() string { return ca.String() }

// Format prints String for every verb, so no verb can reach the keys.
func (ca *CA) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(ca.String())) }

// LogValue logs the CA's subject, fingerprint and expiry, never a key.
func (ca *CA) LogValue() slog.Value {
	if ca == nil || ca.cert == nil {
		return slog.StringValue("pki.CA{}")
	}
	return slog.GroupValue(
		slog.String("subject", ca.cert.Subject.CommonName),
		slog.String("sha256", ca.Fingerprint().String()),
		slog.Time("not_after", ca.cert.NotAfter),
	)
}

// newSerial draws a random positive 128-bit certificate serial number.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// parseECKeyPEM parses an ECDSA private key from a PKCS#8 "PRIVATE KEY" or
// SEC 1 "EC PRIVATE KEY" block. Its errors never include key material.
func parseECKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	switch blk.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, errors.New("malformed PKCS#8 private key")
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key is %T, want ECDSA", k)
		}
		return ek, nil
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, errors.New("malformed EC private key")
		}
		return k, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a private key", blk.Type)
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
