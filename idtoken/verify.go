package idtoken

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/meshd/meshd/codes"
)

const (
	// MaxTokenBytes bounds a raw token: a longer one is refused with
	// codes.JWTInvalid before it is parsed. CI and service-account tokens
	// are 1 to 2 KiB.
	MaxTokenBytes = 16 << 10
	// MaxLifetime bounds exp - iat: a join's token is short-lived, so
	// one that leaks is soon useless and its jti need not be kept long.
	MaxLifetime = time.Hour
	// Leeway is how far a token's nbf and iat may be ahead of this node's
	// clock, for the skew between the issuer's clock and ours. exp gets
	// none: go-oidc refuses a token from the second after its exp.
	Leeway = 30 * time.Second
)

// Deps are the verifier's collaborators.
type Deps struct {
	// Now is the clock every time check reads; nil: time.Now.
	Now func() time.Time
	// HTTPClient fetches discovery documents and key sets; nil: a client
	// with a 10 s timeout.
	HTTPClient *http.Client
	// ValidName checks a node name taken from a token's claim; nil: the
	// rule of enroll.ValidName (lowercase letters, digits and '-', 1 to
	// 63, neither starting nor ending with '-').
	ValidName func(string) error
}

// Verifier verifies a join's JWT against the trusted issuers and maps its
// claims to an Identity. Safe for concurrent use.
type Verifier struct {
	now       func() time.Time
	client    *http.Client
	validName func(string) error
	algs      []string
	joseAlgs  []jose.SignatureAlgorithm
	issuers   []Issuer

	// trusted maps an issuer string to its key set. Reload replaces the
	// whole map, so a Verify sees either the old keys or the new ones.
	trusted atomic.Pointer[map[string]*trusted]
}

// trusted is one issuer with the keys its tokens are verified with:
// a jwks_file's static set, or discovery's remote one, each renewed once
// it is the issuer's keys_max_age old (fresh.go).
type trusted struct {
	cfg  Issuer
	file *fileKeys
	disc *discovery
}

// signingAlgs are the algorithms a token may be signed with: the
// asymmetric ones go-oidc supports. HMAC ("HS256") and "none" are not
// among them, so neither a shared secret nor no signature is accepted.
func signingAlgs() []jose.SignatureAlgorithm {
	return []jose.SignatureAlgorithm{
		jose.RS256, jose.RS384, jose.RS512,
		jose.ES256, jose.ES384, jose.ES512,
		jose.PS256, jose.PS384, jose.PS512,
		jose.EdDSA,
	}
}

// New checks issuers with Validate and reads their jwks_files; a
// discovery issuer is not asked anything until a token names it. ctx is
// not kept.
func New(ctx context.Context, issuers []Issuer, d Deps) (*Verifier, error) {
	if err := Validate(issuers); err != nil {
		return nil, err
	}
	v := &Verifier{now: d.Now, client: d.HTTPClient, validName: d.ValidName, joseAlgs: signingAlgs()}
	if v.now == nil {
		v.now = time.Now
	}
	if v.client == nil {
		v.client = &http.Client{Timeout: 10 * time.Second}
	}
	if v.validName == nil {
		v.validName = validName
	}
	for _, a := range v.joseAlgs {
		v.algs = append(v.algs, string(a))
	}
	for _, is := range issuers {
		is.Rules = slices.Clone(is.Rules)
		for j, r := range is.Rules {
			is.Rules[j].Claims = maps.Clone(r.Claims)
			is.Rules[j].Groups = slices.Clone(r.Groups)
		}
		v.issuers = append(v.issuers, is)
	}
	if err := v.Reload(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// Reload reads every jwks_file again, so an issuer's rotated keys are
// taken without a restart, and forgets what discovery found, so the next
// token of a discovery issuer discovers it again. If a file cannot be
// read or holds no usable key, Reload changes nothing and returns an
// error wrapping codes.ConfigInvalid.
func (v *Verifier) Reload(ctx context.Context) error {
	m := make(map[string]*trusted, len(v.issuers))
	for i, is := range v.issuers {
		t := &trusted{cfg: is}
		maxAge := is.KeysMaxAge
		if maxAge == 0 {
			maxAge = DefaultKeysMaxAge
		}
		if is.Discovery {
			t.disc = newDiscovery(is.Issuer, v.client, v.now, maxAge)
		} else {
			keys, err := readFileKeys(is.JWKSFile, v.now, maxAge)
			if err != nil {
				return codes.Wrap(codes.ConfigInvalid, fmt.Errorf("issuers[%d] (%s): %w", i, is.Issuer, err))
			}
			t.file = keys
		}
		m[is.Issuer] = t
	}
	v.trusted.Store(&m)
	return nil
}

// Verify verifies raw, a compact-serialised JWT (surrounding white space
// is ignored), and returns what it admits. The checks run in this order,
// the first failing one giving the error's code:
//
//  1. at most MaxTokenBytes, three base64url parts, an allowed alg:
//     codes.JWTInvalid;
//  2. the unverified iss names a trusted issuer, decided before any
//     signature is checked: codes.JWTIssuerUnknown;
//  3. go-oidc's IDTokenVerifier: the signature by one of the issuer's
//     keys, claims of the right types, iss again: codes.JWTInvalid;
//  4. aud holds the issuer's audience: codes.JWTAudience;
//  5. exp, iat and jti present, exp - iat at most MaxLifetime:
//     codes.JWTLifetime;
//  6. exp not passed (go-oidc), nbf and iat at most Leeway ahead:
//     codes.JWTExpired;
//  7. a rule matches and its name claim is a valid name: codes.JWTNoRule.
//
// No error carries the token or its signature.
func (v *Verifier) Verify(ctx context.Context, raw string) (Identity, error) {
	if len(raw) > MaxTokenBytes {
		return Identity{}, codes.Wrap(codes.JWTInvalid, fmt.Errorf("token of %d bytes: at most %d", len(raw), MaxTokenBytes))
	}
	raw = strings.TrimSpace(raw)
	iss, err := v.issuerOf(raw)
	if err != nil {
		return Identity{}, codes.Wrap(codes.JWTInvalid, fmt.Errorf("not a signed JWT: %s", clip(err.Error())))
	}
	if iss == "" {
		return Identity{}, codes.Wrap(codes.JWTIssuerUnknown, errors.New("the token has no iss"))
	}
	t := (*v.trusted.Load())[iss]
	if t == nil {
		return Identity{}, codes.Wrap(codes.JWTIssuerUnknown, fmt.Errorf("issuer %q is not trusted", clip(iss)))
	}
	tok, expiry, err := v.verifySigned(ctx, t, raw)
	if err != nil {
		return Identity{}, err
	}
	if len(tok.Audience) == 0 {
		return Identity{}, codes.Wrap(codes.JWTAudience, fmt.Errorf("the token has no aud; want %q", t.cfg.Audience))
	}
	if !slices.Contains(tok.Audience, t.cfg.Audience) {
		return Identity{}, codes.Wrap(codes.JWTAudience,
			fmt.Errorf("the token's audience %q does not hold %q", clip(strings.Join(tok.Audience, ", ")), t.cfg.Audience))
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Identity{}, codes.Wrap(codes.JWTInvalid, fmt.Errorf("claims: %w", err))
	}
	jti, _ := claims["jti"].(string)
	if err := lifetime(tok, jti); err != nil {
		return Identity{}, err
	}
	if err := v.current(tok, claims, expiry); err != nil {
		return Identity{}, err
	}
	id, err := admit(t.cfg.Rules, claims, v.validName)
	if err != nil {
		return Identity{}, err
	}
	sum := sha256.Sum256([]byte(tok.Issuer + "\x00" + jti))
	id.Issuer, id.Subject, id.JTI = tok.Issuer, tok.Subject, hex.EncodeToString(sum[:])
	id.IssuedAt, id.Expires = tok.IssuedAt.UTC(), tok.Expiry.UTC()
	return id, nil
}

// issuerOf reads the iss of a token whose signature is not yet checked,
// to pick the issuer whose keys verify it; nothing else is decided on
// it. go-jose parses the compact form only and refuses an algorithm not
// in signingAlgs, "none" among them.
func (v *Verifier) issuerOf(raw string) (string, error) {
	tok, err := jwt.ParseSigned(raw, v.joseAlgs)
	if err != nil {
		return "", err
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if err := tok.UnsafeClaimsWithoutVerification(&c); err != nil {
		return "", err
	}
	return c.Issuer, nil
}

// verifySigned has go-oidc verify raw with t's keys: the signature, the
// claims' types and the issuer, then exp and nbf. The audience check is
// skipped there and done by Verify, so that it gets its own code.
//
// go-oidc's errors carry no type but the expiry's, so a failure is told
// apart by what failed before it: sigRecorder notes whether the
// signature held. If it did not, the token is invalid. If it did, a
// later check failed; the token is verified again skipping only the
// expiry check, and if that passes the failure was the expiry check
// (exp, or an nbf past go-oidc's own 5 minutes of leeway). Its error is
// returned as expiry for Verify to report after the audience and
// lifetime checks, so the order of the codes does not depend on which of
// go-oidc's checks failed first. The second verification is spent only
// on a token the issuer signed.
func (v *Verifier) verifySigned(ctx context.Context, t *trusted, raw string) (tok *oidc.IDToken, expiry error, err error) {
	keys, err := t.keySet(ctx)
	if err != nil {
		return nil, nil, codes.Wrap(codes.JWTInvalid, fmt.Errorf("the keys of issuer %s are unknown: %s", t.cfg.Issuer, clip(err.Error())))
	}
	cfg := oidc.Config{SkipClientIDCheck: true, SupportedSigningAlgs: v.algs, Now: v.now}
	rec := &sigRecorder{keys: keys}
	tok, err = oidc.NewVerifier(t.cfg.Issuer, rec, &cfg).Verify(ctx, raw)
	if err == nil {
		return tok, nil, nil
	}
	if !rec.verified {
		return nil, nil, codes.Wrap(codes.JWTInvalid, fmt.Errorf("no key of issuer %s verifies the token: %s", t.cfg.Issuer, clip(err.Error())))
	}
	cfg.SkipExpiryCheck = true
	tok, err2 := oidc.NewVerifier(t.cfg.Issuer, keys, &cfg).Verify(ctx, raw)
	if err2 != nil {
		return nil, nil, codes.Wrap(codes.JWTInvalid, fmt.Errorf("signed by issuer %s, but its claims are not valid: %s", t.cfg.Issuer, clip(err2.Error())))
	}
	return tok, err, nil
}

// keySet returns the keys t's tokens are verified with.
func (t *trusted) keySet(ctx context.Context) (oidc.KeySet, error) {
	switch {
	case t.disc != nil:
		return t.disc.keySet(ctx)
	case t.file != nil:
		return t.file.current()
	}
	return nil, errNoKeySet
}

// sigRecorder is the key set go-oidc verifies with during one Verify: it
// passes the check to the issuer's keys and notes whether the signature
// held, which go-oidc's untyped errors do not say.
type sigRecorder struct {
	keys     oidc.KeySet
	verified bool
}

func (r *sigRecorder) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	payload, err := r.keys.VerifySignature(ctx, jwt)
	r.verified = err == nil
	return payload, err
}

// lifetime checks that the token has exp, iat and jti, and that it lives
// at most MaxLifetime.
func lifetime(tok *oidc.IDToken, jti string) error {
	var why string
	switch life := tok.Expiry.Sub(tok.IssuedAt); {
	case tok.Expiry.IsZero():
		why = "the token has no exp"
	case tok.IssuedAt.IsZero():
		why = "the token has no iat"
	case jti == "":
		why = "the token has no jti (a non-empty string)"
	case life <= 0:
		why = fmt.Sprintf("the token's exp %s is not after its iat %s", stamp(tok.Expiry), stamp(tok.IssuedAt))
	case life > MaxLifetime:
		why = fmt.Sprintf("the token lives %s from iat to exp, more than %s", life, MaxLifetime)
	default:
		return nil
	}
	return codes.Wrap(codes.JWTLifetime, errors.New(why))
}

// current checks the token is valid now: go-oidc's expiry check (passed
// in as expiry when it failed), nbf and iat at most Leeway ahead.
func (v *Verifier) current(tok *oidc.IDToken, claims map[string]any, expiry error) error {
	now := v.now()
	var expired *oidc.TokenExpiredError
	if errors.As(expiry, &expired) {
		return codes.Wrap(codes.JWTExpired, fmt.Errorf("the token expired at %s; now is %s", stamp(expired.Expiry), stamp(now)))
	}
	// go-oidc has read nbf as a number (its claims would not verify
	// otherwise); it is truncated to seconds as go-oidc does.
	if nbf, ok := claims["nbf"].(float64); ok {
		if at := time.Unix(int64(nbf), 0); at.After(now.Add(Leeway)) {
			return codes.Wrap(codes.JWTExpired, fmt.Errorf("the token is not valid before %s; now is %s", stamp(at), stamp(now)))
		}
	}
	if tok.IssuedAt.After(now.Add(Leeway)) {
		return codes.Wrap(codes.JWTExpired, fmt.Errorf("the token was issued at %s, ahead of now, %s", stamp(tok.IssuedAt), stamp(now)))
	}
	if expiry != nil {
		// go-oidc's nbf check failed, which the one above should have
		// caught first: refuse the token all the same.
		return codes.Wrap(codes.JWTExpired, fmt.Errorf("the token is not valid yet: %s", clip(expiry.Error())))
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
