package enroll

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/meshd/meshd/codes"
)

// Limits of a reusable enrolment key (issue 31). A key admits up to Uses
// machines until it expires, each under a name the cluster gives; it pins
// the CA like a one-time token and is stored only as its hash.
const (
	MaxKeyTTL     = 30 * 24 * time.Hour // longest lifetime a key may have
	DefaultKeyTTL = 24 * time.Hour      // lifetime of a key minted without --ttl
	MaxKeyUses    = 100000              // most machines one key may admit
	// MaxKeyPrefix leaves room in a 63-character name for the largest
	// number a key gives (MaxKeyUses has 6 digits) and a margin.
	MaxKeyPrefix = 56
)

// CheckKeyLimits accepts a key's uses (1 to MaxKeyUses), lifetime
// (MinTTL to MaxKeyTTL) and name prefix (ValidKeyPrefix); anything else
// is codes.KeyBadLimits.
func CheckKeyLimits(uses int, ttl time.Duration, prefix string) error {
	if uses < 1 || uses > MaxKeyUses {
		return codes.Wrap(codes.KeyBadLimits, fmt.Errorf("--uses %d: want 1 to %d", uses, MaxKeyUses))
	}
	if ttl < MinTTL || ttl > MaxKeyTTL {
		return codes.Wrap(codes.KeyBadLimits, fmt.Errorf("key lifetime %s: want %s to %s", ttl, MinTTL, MaxKeyTTL))
	}
	return ValidKeyPrefix(prefix)
}

// ValidKeyPrefix accepts a name prefix that gives valid node names when a
// number follows: 1 to MaxKeyPrefix of a-z, 0-9 and '-', not starting with
// '-' (it may end with one: "web-" gives web-1, web-2, ...).
func ValidKeyPrefix(prefix string) error {
	bad := len(prefix) == 0 || len(prefix) > MaxKeyPrefix || prefix[0] == '-'
	for i := 0; i < len(prefix) && !bad; i++ {
		c := prefix[i]
		bad = !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if bad {
		return codes.Wrap(codes.KeyBadLimits, fmt.Errorf("name prefix %q: want 1-%d of a-z, 0-9, '-', not starting with '-'", prefix, MaxKeyPrefix))
	}
	return nil
}

// KeyName is the n-th name a key with prefix gives: prefix followed by n.
func KeyName(prefix string, n int) string { return prefix + strconv.Itoa(n) }

// PrefixesOverlap reports whether two keys' prefixes could give the same
// name: one starts the other ("web-" and "web-1" both give web-10).
func PrefixesOverlap(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return b[:len(a)] == a
}

// KeyNodeID is the node id of the machine whose TLS public key (PKIX DER)
// a key admits: the same joiner asking again with the same key maps to the
// same record, so a join whose answer was lost resumes instead of
// admitting a second node.
func KeyNodeID(key TokenHash, tlsPublicKey []byte) string {
	h := sha256.New()
	h.Write([]byte("meshd enrolment key node id\x00"))
	h.Write(key[:])
	h.Write(tlsPublicKey)
	return hex.EncodeToString(h.Sum(nil)[:16])
}
