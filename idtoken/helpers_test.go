package idtoken

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// t0 is the tests' fixed now.
var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

const (
	testIssuer   = "https://ci.example.test"
	testAudience = "meshd-test"
)

// testKey is a signing key and its public JWK.
type testKey struct {
	priv crypto.Signer
	alg  jose.SignatureAlgorithm
	kid  string
}

func newECKey(t testing.TB, kid string) testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{priv: k, alg: jose.ES256, kid: kid}
}

func newRSAKey(t testing.TB, kid string) testKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{priv: k, alg: jose.RS256, kid: kid}
}

func (k testKey) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
}

// jwks marshals the public keys as a JSON Web Key Set.
func jwks(t testing.TB, keys ...testKey) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, k.public())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeJWKS writes the keys' public JWKS to a file in dir.
func writeJWKS(t testing.TB, dir, name string, keys ...testKey) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, jwks(t, keys...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sign makes a compact JWT of claims signed by k, with go-jose's builder.
func sign(t testing.TB, k testKey, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// claims is a good token's claims for testIssuer, valid at t0, with the
// changes given: a nil value removes the claim.
func claims(changes map[string]any) map[string]any {
	c := map[string]any{
		"iss":        testIssuer,
		"aud":        testAudience,
		"sub":        "repo:meshd/meshd:ref:refs/heads/main",
		"iat":        t0.Add(-time.Minute).Unix(),
		"nbf":        t0.Add(-time.Minute).Unix(),
		"exp":        t0.Add(9 * time.Minute).Unix(),
		"jti":        "run-1234-attempt-1",
		"repository": "meshd/meshd",
		"ref":        "refs/heads/main",
		"runner":     "ci-7",
	}
	for k, v := range changes {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// testRules are testIssuer's rules.
func testRules() []Rule {
	return []Rule{
		{Claims: map[string]string{"repository": "meshd/meshd", "ref": "refs/heads/main"}, Role: "control",
			Groups: []string{"ci", "deploy"}, NameClaim: "runner"},
		{Claims: map[string]string{"groups": "b"}, Groups: []string{"ci"}, NamePrefix: "ci-", Ephemeral: true},
		{Claims: map[string]string{"repository": "other/name"}, NamePrefix: "other-"},
	}
}

// clock is a settable Deps.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// signature is the third part of a compact JWT, "" if it has none.
func signature(raw string) string {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return ""
	}
	return parts[2]
}
