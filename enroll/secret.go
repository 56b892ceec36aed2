package enroll

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
)

// SecretSize is the token secret length in bytes (256 bits).
const SecretSize = 32

// Secret is a token's one-time secret. It prints and logs as "[redacted]";
// only MarshalJSON (the enroll request on the wire) and the token encoding
// reveal it.
type Secret [SecretSize]byte

// NewSecret draws a fresh secret from crypto/rand.
func NewSecret() (Secret, error) {
	var s Secret
	_, err := rand.Read(s[:])
	return s, err
}

// Hash is what the ledger stores and looks tokens up by.
func (s Secret) Hash() TokenHash { return TokenHash(sha256.Sum256(s[:])) }

// Equal compares in constant time.
func (s Secret) Equal(o Secret) bool { return subtle.ConstantTimeCompare(s[:], o[:]) == 1 }

// IsZero reports whether s is unset.
func (s Secret) IsZero() bool { return s == Secret{} }

func (Secret) String() string             { return "[redacted]" }
func (Secret) GoString() string           { return "enroll.Secret{[redacted]}" }
func (Secret) LogValue() slog.Value       { return slog.StringValue("[redacted]") }
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[redacted]")) }

// MarshalJSON sends the secret on the (TLS-protected) wire.
func (s Secret) MarshalJSON() ([]byte, error) {
	return []byte(`"` + base64.RawURLEncoding.EncodeToString(s[:]) + `"`), nil
}

func (s *Secret) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return errBadSecret
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(string(b[1 : len(b)-1]))
	if err != nil || len(raw) != SecretSize {
		return errBadSecret
	}
	copy(s[:], raw)
	return nil
}
