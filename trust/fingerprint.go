package trust

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
)

// Fingerprint is the full SHA-256 of a certificate's DER encoding. It is
// never truncated: it is a joiner's only trust anchor.
type Fingerprint [sha256.Size]byte

// FingerprintOf returns the SHA-256 of cert's DER.
func FingerprintOf(cert *x509.Certificate) Fingerprint { return sha256.Sum256(cert.Raw) }

// IsZero reports whether f is unset.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// String is the lowercase hex form, 64 characters.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// ParseFingerprint reads the 64-character hex form.
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(f) {
		return f, fmt.Errorf("fingerprint %q: want %d hex characters", s, 2*len(f))
	}
	copy(f[:], b)
	return f, nil
}
