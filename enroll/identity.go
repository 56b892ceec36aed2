package enroll

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// A join by identity (issue 31): the joiner holds no cluster secret, only
// a short-lived JWT its platform gave it (a CI job's OIDC token, a
// Kubernetes projected service-account token). A control node that
// trusts the JWT's issuer verifies it (IdentityVerifier, the agent's
// idtoken room) and admits what the issuer's claim rules give; the jti is
// recorded in raft with the admission, so the JWT admits once. The joiner
// still pins the cluster CA (--ca-sha256): there is no trust on first use.

// MaxJWT bounds a JWT in an enroll request.
const MaxJWT = 16 << 10

// RawJWT is a JWT as the joiner sends it. It prints and logs redacted;
// only MarshalJSON (the enroll request on the TLS-protected wire) reveals
// it.
type RawJWT string

func (RawJWT) String() string             { return "[redacted]" }
func (RawJWT) GoString() string           { return "enroll.RawJWT{[redacted]}" }
func (RawJWT) LogValue() slog.Value       { return slog.StringValue("[redacted]") }
func (RawJWT) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[redacted]")) }

// MarshalJSON sends the JWT on the wire.
func (j RawJWT) MarshalJSON() ([]byte, error) { return json.Marshal(string(j)) }

// Identity is what a verified JWT admits: who it names, the one-time id
// of the JWT, and what the issuer's first matching claim rule gives.
type Identity struct {
	Issuer    string     `json:"issuer"`
	Subject   string     `json:"subject"`
	JTI       string     `json:"jti"` // hex SHA-256 of issuer, NUL, jti: the replay key raft records
	Expires   time.Time  `json:"expires"`
	Role      trust.Role `json:"role"`
	Groups    []string   `json:"groups,omitempty"`
	Name      string     `json:"name,omitempty"`        // the node name a claim gives, or
	Prefix    string     `json:"name_prefix,omitempty"` // the prefix the cluster names it under
	Ephemeral bool       `json:"ephemeral,omitempty"`
	Rule      int        `json:"rule"` // which of the issuer's rules matched, for the audit log
}

// Check refuses an identity the admission cannot record: no issuer or
// jti, a role other than worker or control, an ephemeral control node, a
// bad name or prefix (exactly one of the two), bad groups.
func (id Identity) Check() error {
	bad := func(format string, args ...any) error {
		return codes.Wrap(codes.JWTNoRule, fmt.Errorf("identity of %s: "+format, append([]any{id.Subject}, args...)...))
	}
	if id.Issuer == "" || len(id.JTI) != 2*sha256.Size {
		return bad("no issuer or replay key")
	}
	if _, err := trust.ParseRole(string(id.Role)); err != nil {
		return bad("role %q", id.Role)
	}
	if id.Ephemeral && id.Role != trust.RoleWorker {
		return bad("only workers can be ephemeral")
	}
	switch {
	case id.Name != "" && id.Prefix != "":
		return bad("both a name and a name prefix")
	case id.Name != "":
		if err := ValidName(id.Name); err != nil {
			return bad("%v", err)
		}
	default:
		if err := ValidKeyPrefix(id.Prefix); err != nil {
			return bad("%v", err)
		}
	}
	if err := trust.CheckNodeGroups(id.Groups); err != nil {
		return bad("%v", err)
	}
	return nil
}

// ReplayKey is the JTI as a TokenHash: the key node ids are derived from
// (IdentityNodeID) and raft records the JWT's use under.
func (id Identity) ReplayKey() (TokenHash, error) {
	var h TokenHash
	err := h.UnmarshalText([]byte(id.JTI))
	return h, err
}

// IdentityVerifier verifies a join's JWT against the issuers this control
// node trusts and maps its claims to what it admits. Every refusal carries
// its code (codes.JWTInvalid, JWTIssuerUnknown, JWTAudience, JWTExpired,
// JWTLifetime, JWTNoRule); an error never quotes the JWT.
type IdentityVerifier interface {
	Verify(ctx context.Context, raw string) (Identity, error)
}

// errNoIdentities: this control node trusts no issuer.
var errNoIdentities = errors.New("this control node trusts no JWT issuer (jwt.issuers in meshd.yaml)")

// IdentityToken is what a join by identity joins with in place of a
// minted token: the JWT, the seed it asks (host:port) and the cluster CA
// it pins (the operator gives --ca-sha256: there is no trust on first
// use). It carries no secret, cluster id or name; its expiry is an hour
// from now, the longest a JWT may live (the seed judges the JWT's own).
// It is never encoded: Encode refuses it.
func IdentityToken(jwt RawJWT, seed string, ca trust.Fingerprint, now time.Time) (Token, error) {
	switch {
	case jwt == "":
		return Token{}, codes.Wrap(codes.JWTInvalid, errors.New("the JWT file is empty"))
	case len(jwt) > MaxJWT:
		return Token{}, codes.Wrap(codes.JWTInvalid, fmt.Errorf("JWT of %d bytes, at most %d", len(jwt), MaxJWT))
	case ca.IsZero():
		return Token{}, codes.Wrap(codes.CAMismatch, errors.New("a join by JWT needs the cluster CA's SHA-256 (--ca-sha256)"))
	}
	if err := validSeed(seed); err != nil {
		return Token{}, codes.Wrap(codes.BadRequest, fmt.Errorf("--seed: %w", err))
	}
	return Token{CA: ca, Seeds: []string{seed}, Expires: now.Add(MaxTTL).UTC().Truncate(time.Second), JWT: jwt}, nil
}

// PendingID is what a join's saved keys are filed under (statedir's
// pending join): the hash of the token's secret, or of the JWT of a join
// by identity.
func (t Token) PendingID() string {
	if t.JWT != "" {
		sum := sha256.Sum256([]byte(t.JWT))
		return TokenHash(sum).String()
	}
	return t.Secret.Hash().String()
}
