package enroll

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// Token lifetimes and the format version.
const (
	TokenVersion = 1                // the only version ParseToken accepts
	DefaultTTL   = 15 * time.Minute // lifetime of a token minted without --ttl
	MaxTTL       = time.Hour        // longest lifetime a token may have
	MinTTL       = time.Minute      // shortest lifetime a token may have
)

// Limits on the seed list a token carries.
const (
	MaxSeeds   = 16  // at most this many enroll endpoints
	MaxSeedLen = 255 // bytes per endpoint ("host:port")
)

// tokenPrefix is the version prefix of a v1 token; it is also covered by the
// checksum, so a payload cannot be moved under another version.
const tokenPrefix = "mesh1_"

// Layout of the fixed part of the payload.
const (
	clusterIDSize = 16
	fixedSize     = clusterIDSize + len(trust.Fingerprint{}) + SecretSize + 8 + 1 // id, CA, secret, expiry, role
	crcSize       = 4
)

// Role bytes in the payload.
const (
	roleByteWorker  = 1
	roleByteControl = 2
	roleByteNebula  = 3 // a stock Nebula member (issue 35): spent by `meshctl nebula-bundle`
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Token is a one-time join token: everything a new machine needs to find the
// cluster, trust it, and be admitted under one name and role. It prints and
// logs redacted; only Encode reveals the secret.
type Token struct {
	ClusterID string            // 32 lowercase hex characters (16 bytes)
	CA        trust.Fingerprint // full SHA-256 of the cluster CA cert: the joiner's only trust anchor
	Seeds     []string          // enroll endpoints "host:port" of every control node, 1 to MaxSeeds
	Name      string            // the one node name it admits (ValidName)
	Role      trust.Role        // the role it admits
	Expires   time.Time         // whole seconds, UTC
	Secret    Secret            // the one-time secret; the cluster stores only its hash
	// NextCA is the next cluster CA's fingerprint when the token was
	// minted during a CA rotation (zero otherwise): the joiner trusts a
	// seed that chains to CA or to NextCA. It travels as an optional
	// trailer of the payload (nextCATag, then 32 bytes).
	NextCA trust.Fingerprint
	// SeedIDs are the node ids of the control nodes at Seeds, in the same
	// order (none in a token the previous release minted): the joiner
	// sends its secret to a seed only if the seed's leaf names that id,
	// and a removal revokes every unused token naming the removed node,
	// so a node removed with its leaf still valid cannot take a joiner's
	// secret (issue 27). It travels as a second optional trailer
	// (seedIDsTag, a count, then each id length-prefixed).
	SeedIDs []string
	// Key: a reusable enrolment key (issue 31), not a one-time token.
	// Name then holds the name prefix (ValidKeyPrefix): the cluster gives
	// each joiner its name. It travels as a third optional trailer
	// (keyTag, then a flags byte whose bit 0 is set); a joiner of an
	// earlier release refuses such a token as corrupt.
	Key bool
	// Renew: a renewal token for the stock Nebula member Name (`meshctl
	// admit NAME --nebula-only --renew`), spent by `meshctl nebula-bundle
	// --renew` for a new certificate of the key the member holds. Only
	// with role nebula. It travels as a fourth optional trailer (renewTag,
	// then a flags byte whose bit 0 is set).
	Renew bool
	// JWT is set in a token built for a join by identity (IdentityToken),
	// never in one minted: it has no secret, cluster id or name, and the
	// cluster names the node. Encode refuses it.
	JWT RawJWT
}

// Tags of the payload's optional trailers, in the order they appear.
const (
	nextCATag  = 0x01
	seedIDsTag = 0x02
	keyTag     = 0x03
	renewTag   = 0x04
)

// keyFlagReusable is bit 0 of the key trailer's flags byte; every other
// bit is reserved (zero).
const keyFlagReusable = 0x01

// renewFlag is bit 0 of the renew trailer's flags byte; every other bit is
// reserved (zero).
const renewFlag = 0x01

// MaxSeedIDLen bounds a seed's node id in a token.
const MaxSeedIDLen = 64

// SeedID is the node id the token names for seed ("" when it names none:
// a token of the previous release).
func (t Token) SeedID(seed string) string {
	if len(t.SeedIDs) != len(t.Seeds) {
		return ""
	}
	for i, s := range t.Seeds {
		if s == seed {
			return t.SeedIDs[i]
		}
	}
	return ""
}

// Pins are the CA fingerprints the token pins: CA, and NextCA if set.
func (t Token) Pins() []trust.Fingerprint {
	if t.NextCA.IsZero() {
		return []trust.Fingerprint{t.CA}
	}
	return []trust.Fingerprint{t.CA, t.NextCA}
}

// Encode returns the one-line form of t:
//
//	mesh1_ + base64url(payload || crc32c("mesh1_" || payload))
//
// It refuses a token without a CA fingerprint, secret or seed, or with a
// bad cluster id, name or role (the error carries the matching code).
func (t Token) Encode() (string, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	id, _ := hex.DecodeString(t.ClusterID) // validated
	b := make([]byte, 0, fixedSize+1+len(t.Name)+1+len(t.Seeds)*32+crcSize)
	b = append(b, id...)
	b = append(b, t.CA[:]...)
	b = append(b, t.Secret[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(t.Expires.Unix()))
	b = append(b, roleByte(t.Role))
	b = append(b, byte(len(t.Name)))
	b = append(b, t.Name...)
	b = append(b, byte(len(t.Seeds)))
	for _, s := range t.Seeds {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	if !t.NextCA.IsZero() {
		b = append(b, nextCATag)
		b = append(b, t.NextCA[:]...)
	}
	if len(t.SeedIDs) > 0 {
		b = append(b, seedIDsTag, byte(len(t.SeedIDs)))
		for _, id := range t.SeedIDs {
			b = append(b, byte(len(id)))
			b = append(b, id...)
		}
	}
	if t.Key {
		b = append(b, keyTag, keyFlagReusable)
	}
	if t.Renew {
		b = append(b, renewTag, renewFlag)
	}
	b = binary.BigEndian.AppendUint32(b, checksum(b))
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseToken decodes a token as Encode writes it. Surrounding whitespace is
// ignored. A prefix of another shape, a bad checksum, a wrong length or a bad
// field is codes.TokenCorrupt; a well-formed prefix of another version is
// codes.TokenVersion. ParseToken does not judge expiry: see CheckExpiry.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	body, err := splitPrefix(s)
	if err != nil {
		return Token{}, err
	}
	// The base64 decoder skips CR and LF even in strict mode; a token has
	// exactly one spelling, so refuse them here.
	if strings.ContainsAny(body, "\r\n") {
		return Token{}, corrupt("line break inside the token")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(body)
	if err != nil {
		return Token{}, corrupt("not base64url")
	}
	if len(b) < fixedSize+2+crcSize {
		return Token{}, corrupt("too short")
	}
	payload, sum := b[:len(b)-crcSize], binary.BigEndian.Uint32(b[len(b)-crcSize:])
	if checksum(payload) != sum {
		return Token{}, corrupt("checksum mismatch")
	}
	t, err := decodePayload(payload)
	if err != nil {
		return Token{}, corrupt(err.Error())
	}
	if err := t.validate(); err != nil {
		return Token{}, corrupt(err.Error())
	}
	return t, nil
}

// splitPrefix checks the "mesh<digits>_" prefix and returns what follows.
func splitPrefix(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, "mesh")
	if !ok {
		return "", corrupt("does not start with mesh1_")
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n == len(rest) || rest[n] != '_' {
		return "", corrupt("does not start with mesh1_")
	}
	if v := rest[:n]; v != strconv.Itoa(TokenVersion) {
		return "", codes.Wrap(codes.TokenVersion, fmt.Errorf("join token version %s: this meshd reads version %d", v, TokenVersion))
	}
	return rest[n+1:], nil
}

// decodePayload reads the binary layout; trailing bytes are an error.
func decodePayload(p []byte) (Token, error) {
	var t Token
	t.ClusterID = hex.EncodeToString(p[:clusterIDSize])
	p = p[clusterIDSize:]
	copy(t.CA[:], p)
	p = p[len(t.CA):]
	copy(t.Secret[:], p)
	p = p[SecretSize:]
	t.Expires = time.Unix(int64(binary.BigEndian.Uint64(p)), 0).UTC()
	p = p[8:]
	switch p[0] {
	case roleByteWorker:
		t.Role = trust.RoleWorker
	case roleByteControl:
		t.Role = trust.RoleControl
	case roleByteNebula:
		t.Role = trust.RoleNebula
	default:
		return Token{}, fmt.Errorf("unknown role byte %d", p[0])
	}
	p = p[1:]
	name, p, ok := lenPrefixed(p)
	if !ok {
		return Token{}, errors.New("name overruns the token")
	}
	t.Name = string(name)
	if len(p) < 1 {
		return Token{}, errors.New("seed count missing")
	}
	n := int(p[0])
	p = p[1:]
	if n > MaxSeeds {
		return Token{}, fmt.Errorf("%d seeds, at most %d", n, MaxSeeds)
	}
	t.Seeds = make([]string, 0, n)
	for range n {
		var seed []byte
		if seed, p, ok = lenPrefixed(p); !ok {
			return Token{}, errors.New("seed overruns the token")
		}
		t.Seeds = append(t.Seeds, string(seed))
	}
	if len(p) >= 1+len(t.NextCA) && p[0] == nextCATag {
		copy(t.NextCA[:], p[1:])
		if t.NextCA.IsZero() {
			return Token{}, errors.New("a zero next CA fingerprint")
		}
		p = p[1+len(t.NextCA):]
	}
	if len(p) >= 2 && p[0] == seedIDsTag {
		n := int(p[1])
		if n != len(t.Seeds) {
			return Token{}, fmt.Errorf("%d seed ids for %d seeds", n, len(t.Seeds))
		}
		p = p[2:]
		t.SeedIDs = make([]string, 0, n)
		for range n {
			var id []byte
			if id, p, ok = lenPrefixed(p); !ok {
				return Token{}, errors.New("seed id overruns the token")
			}
			t.SeedIDs = append(t.SeedIDs, string(id))
		}
	}
	if len(p) >= 2 && p[0] == keyTag {
		if p[1] != keyFlagReusable {
			return Token{}, fmt.Errorf("key flags %#x", p[1])
		}
		t.Key = true
		p = p[2:]
	}
	if len(p) >= 2 && p[0] == renewTag {
		if p[1] != renewFlag {
			return Token{}, fmt.Errorf("renew flags %#x", p[1])
		}
		t.Renew = true
		p = p[2:]
	}
	if len(p) != 0 {
		return Token{}, fmt.Errorf("%d trailing bytes", len(p))
	}
	return t, nil
}

// lenPrefixed splits a one-byte-length-prefixed field off p.
func lenPrefixed(p []byte) (field, rest []byte, ok bool) {
	if len(p) < 1 || len(p) < 1+int(p[0]) {
		return nil, nil, false
	}
	n := int(p[0])
	return p[1 : 1+n], p[1+n:], true
}

// String shows the cluster id, name, role and expiry, never the secret.
func (t Token) String() string {
	kind := "name"
	if t.Key {
		kind = "key name_prefix"
	}
	return fmt.Sprintf("enroll.Token{cluster=%s %s=%s role=%s expires=%s secret=[redacted]}",
		t.ClusterID, kind, t.Name, t.Role, t.Expires.UTC().Format(time.RFC3339))
}

// GoString is String, so %#v is redacted too.
func (t Token) GoString() string { return t.String() }

// Format makes every verb (%v, %+v, %#v, %s, %x, ...) print the redacted
// form.
func (t Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue logs the redacted fields as a group.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("cluster", t.ClusterID),
		slog.String("name", t.Name),
		slog.String("role", string(t.Role)),
		slog.Time("expires", t.Expires),
		slog.String("secret", "[redacted]"),
	)
}

// MarshalJSON refuses: a token holds its secret, and the only way out of
// the process is Encode, shown once to the operator.
func (Token) MarshalJSON() ([]byte, error) {
	return nil, errors.New("a join token is never marshalled to JSON; use Encode")
}
