package idtoken

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/meshd/meshd/codes"
)

const k8sIssuer = "kubernetes/cluster-a"

// fixture is a verifier trusting testIssuer (an EC and an RSA key in a
// jwks_file) and k8sIssuer (an issuer string that is not a URL), on the
// fixed clock t0.
type fixture struct {
	v                 *Verifier
	ec, rsa, k8s, bad testKey
	deps              Deps
	issuers           []Issuer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{ec: newECKey(t, "ec-1"), rsa: newRSAKey(t, "rsa-1"), k8s: newECKey(t, "k8s-1"), bad: newECKey(t, "ec-1")}
	f.issuers = []Issuer{
		{Issuer: testIssuer, JWKSFile: writeJWKS(t, dir, "ci.json", f.ec, f.rsa), Audience: testAudience, Rules: testRules()},
		{Issuer: k8sIssuer, JWKSFile: writeJWKS(t, dir, "k8s.json", f.k8s), Audience: testAudience, Rules: []Rule{
			{Claims: map[string]string{"sub": "system:serviceaccount:build:runner"}, NamePrefix: "k8s-", Ephemeral: true},
		}},
	}
	f.deps = Deps{Now: func() time.Time { return t0 }}
	v, err := New(context.Background(), f.issuers, f.deps)
	if err != nil {
		t.Fatal(err)
	}
	f.v = v
	return f
}

func b64(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func jtiHash(iss, jti string) string {
	sum := sha256.Sum256([]byte(iss + "\x00" + jti))
	return hex.EncodeToString(sum[:])
}

func TestVerify(t *testing.T) {
	f := newFixture(t)
	good := sign(t, f.ec, claims(nil))
	parts := strings.Split(good, ".")
	at := func(d time.Duration) int64 { return t0.Add(d).Unix() }

	// hs256 is signed with HMAC keyed by the RSA key's public DER, the
	// old confusion of a verifier that lets the token pick the algorithm.
	der, err := x509.MarshalPKIXPublicKey(f.rsa.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	hs, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: der}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	hs256, err := jwt.Signed(hs).Claims(claims(nil)).Serialize()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		raw   string
		want  codes.Code
		check func(t *testing.T, id Identity)
	}{
		{name: "ok/es256-name-claim", raw: good, check: func(t *testing.T, id Identity) {
			want := Identity{Issuer: testIssuer, Subject: "repo:meshd/meshd:ref:refs/heads/main",
				JTI: jtiHash(testIssuer, "run-1234-attempt-1"), IssuedAt: t0.Add(-time.Minute), Expires: t0.Add(9 * time.Minute),
				Role: "control", Groups: []string{"ci", "deploy"}, Name: "ci-7", Rule: 0}
			same(t, id, want)
		}},
		{name: "ok/rs256-array-claim-prefix", raw: sign(t, f.rsa, claims(map[string]any{"repository": "x/y", "groups": []string{"a", "b"}})),
			check: func(t *testing.T, id Identity) {
				want := Identity{Issuer: testIssuer, Subject: "repo:meshd/meshd:ref:refs/heads/main",
					JTI: jtiHash(testIssuer, "run-1234-attempt-1"), IssuedAt: t0.Add(-time.Minute), Expires: t0.Add(9 * time.Minute),
					Role: "worker", Groups: []string{"ci"}, NamePrefix: "ci-", Ephemeral: true, Rule: 1}
				same(t, id, want)
			}},
		{name: "ok/array-claim-single-string", raw: sign(t, f.ec, claims(map[string]any{"repository": "x/y", "groups": "b"})),
			check: func(t *testing.T, id Identity) { equal(t, "rule", id.Rule, 1) }},
		{name: "ok/array-claim-first-element", raw: sign(t, f.ec, claims(map[string]any{"repository": "x/y", "groups": []string{"b", "c"}})),
			check: func(t *testing.T, id Identity) { equal(t, "rule", id.Rule, 1) }},
		{name: "ok/third-rule", raw: sign(t, f.ec, claims(map[string]any{"repository": "other/name"})),
			check: func(t *testing.T, id Identity) {
				equal(t, "rule", id.Rule, 2)
				equal(t, "prefix", id.NamePrefix, "other-")
			}},
		{name: "ok/second-issuer-not-a-url", raw: sign(t, f.k8s, claims(map[string]any{"iss": k8sIssuer, "sub": "system:serviceaccount:build:runner"})),
			check: func(t *testing.T, id Identity) {
				equal(t, "issuer", id.Issuer, k8sIssuer)
				equal(t, "jti", id.JTI, jtiHash(k8sIssuer, "run-1234-attempt-1"))
				equal(t, "prefix", id.NamePrefix, "k8s-")
			}},
		{name: "ok/audience-array", raw: sign(t, f.ec, claims(map[string]any{"aud": []string{"other", testAudience}}))},
		{name: "ok/white-space-around", raw: "\n " + good + "\n"},
		{name: "ok/exp-is-now", raw: sign(t, f.ec, claims(map[string]any{"exp": at(0), "iat": at(-time.Minute)}))},
		{name: "ok/nbf-at-leeway", raw: sign(t, f.ec, claims(map[string]any{"nbf": at(30 * time.Second)}))},
		{name: "ok/iat-at-leeway", raw: sign(t, f.ec, claims(map[string]any{"iat": at(30 * time.Second)}))},
		{name: "ok/lifetime-one-hour", raw: sign(t, f.ec, claims(map[string]any{"iat": at(-time.Minute), "exp": at(59 * time.Minute)}))},
		{name: "ok/no-nbf", raw: sign(t, f.ec, claims(map[string]any{"nbf": nil}))},

		{name: "fail/garbage", raw: "garbage", want: codes.JWTInvalid},
		{name: "fail/empty", raw: "", want: codes.JWTInvalid},
		{name: "fail/two-parts", raw: parts[0] + "." + parts[1], want: codes.JWTInvalid},
		{name: "fail/four-parts", raw: good + ".x", want: codes.JWTInvalid},
		{name: "fail/json-serialisation", raw: `{"payload":"` + parts[1] + `","protected":"` + parts[0] + `","signature":"` + parts[2] + `"}`, want: codes.JWTInvalid},
		{name: "fail/too-long", raw: sign(t, f.ec, claims(map[string]any{"pad": strings.Repeat("x", MaxTokenBytes)})), want: codes.JWTInvalid},
		{name: "fail/alg-none", raw: b64(map[string]string{"alg": "none", "typ": "JWT"}) + "." + parts[1] + ".", want: codes.JWTInvalid},
		{name: "fail/alg-hs256-key-confusion", raw: hs256, want: codes.JWTInvalid},
		{name: "fail/tampered-payload", raw: parts[0] + "." + b64(claims(map[string]any{"runner": "ci-8"})) + "." + parts[2], want: codes.JWTInvalid},
		{name: "fail/tampered-signature", raw: parts[0] + "." + parts[1] + "." + flip(parts[2]), want: codes.JWTInvalid},
		{name: "fail/key-not-in-jwks", raw: sign(t, f.bad, claims(nil)), want: codes.JWTInvalid},
		{name: "fail/unknown-kid", raw: sign(t, newECKey(t, "ec-9"), claims(nil)), want: codes.JWTInvalid},
		{name: "fail/other-issuers-key", raw: sign(t, f.k8s, claims(nil)), want: codes.JWTInvalid},
		{name: "fail/exp-not-a-number", raw: sign(t, f.ec, claims(map[string]any{"exp": "soon"})), want: codes.JWTInvalid},
		{name: "fail/unknown-issuer", raw: sign(t, f.ec, claims(map[string]any{"iss": "https://evil.example"})), want: codes.JWTIssuerUnknown},
		{name: "fail/issuer-trailing-slash", raw: sign(t, f.ec, claims(map[string]any{"iss": testIssuer + "/"})), want: codes.JWTIssuerUnknown},
		{name: "fail/no-issuer", raw: sign(t, f.ec, claims(map[string]any{"iss": nil})), want: codes.JWTIssuerUnknown},
		{name: "fail/audience", raw: sign(t, f.ec, claims(map[string]any{"aud": "other"})), want: codes.JWTAudience},
		{name: "fail/no-audience", raw: sign(t, f.ec, claims(map[string]any{"aud": nil})), want: codes.JWTAudience},
		{name: "fail/expired", raw: sign(t, f.ec, claims(map[string]any{"iat": at(-10 * time.Minute), "exp": at(-time.Second)})), want: codes.JWTExpired},
		{name: "fail/nbf-ahead", raw: sign(t, f.ec, claims(map[string]any{"nbf": at(31 * time.Second)})), want: codes.JWTExpired},
		{name: "fail/nbf-past-go-oidc-leeway", raw: sign(t, f.ec, claims(map[string]any{"nbf": at(6 * time.Minute)})), want: codes.JWTExpired},
		{name: "fail/iat-ahead", raw: sign(t, f.ec, claims(map[string]any{"iat": at(31 * time.Second), "nbf": nil})), want: codes.JWTExpired},
		{name: "fail/lifetime-over-an-hour", raw: sign(t, f.ec, claims(map[string]any{"iat": at(-time.Minute), "exp": at(59*time.Minute + time.Second)})), want: codes.JWTLifetime},
		{name: "fail/exp-before-iat", raw: sign(t, f.ec, claims(map[string]any{"iat": at(2 * time.Minute), "exp": at(time.Minute), "nbf": nil})), want: codes.JWTLifetime},
		{name: "fail/no-exp", raw: sign(t, f.ec, claims(map[string]any{"exp": nil})), want: codes.JWTLifetime},
		{name: "fail/no-iat", raw: sign(t, f.ec, claims(map[string]any{"iat": nil})), want: codes.JWTLifetime},
		{name: "fail/no-jti", raw: sign(t, f.ec, claims(map[string]any{"jti": nil})), want: codes.JWTLifetime},
		{name: "fail/empty-jti", raw: sign(t, f.ec, claims(map[string]any{"jti": ""})), want: codes.JWTLifetime},
		{name: "fail/jti-number", raw: sign(t, f.ec, claims(map[string]any{"jti": 42})), want: codes.JWTLifetime},
		{name: "fail/no-rule", raw: sign(t, f.ec, claims(map[string]any{"repository": "nope/nope"})), want: codes.JWTNoRule},
		{name: "fail/array-without-value", raw: sign(t, f.ec, claims(map[string]any{"repository": "x", "groups": []string{"a", "c"}})), want: codes.JWTNoRule},
		{name: "fail/array-with-non-string", raw: sign(t, f.ec, claims(map[string]any{"repository": "x", "groups": []any{"b", 1}})), want: codes.JWTNoRule},
		{name: "fail/claim-number", raw: sign(t, f.ec, claims(map[string]any{"repository": "x", "groups": 7})), want: codes.JWTNoRule},
		{name: "fail/claim-object", raw: sign(t, f.ec, claims(map[string]any{"repository": map[string]string{"name": "meshd/meshd"}})), want: codes.JWTNoRule},
		{name: "fail/name-claim-invalid", raw: sign(t, f.ec, claims(map[string]any{"runner": "CI_7"})), want: codes.JWTNoRule},
		{name: "fail/name-claim-missing", raw: sign(t, f.ec, claims(map[string]any{"runner": nil})), want: codes.JWTNoRule},
		{name: "fail/name-claim-number", raw: sign(t, f.ec, claims(map[string]any{"runner": 7})), want: codes.JWTNoRule},
		{name: "fail/name-claim-missing-not-next-rule", raw: sign(t, f.ec, claims(map[string]any{"runner": nil, "groups": []string{"b"}})), want: codes.JWTNoRule},
		{name: "fail/name-claim-invalid-not-next-rule", raw: sign(t, f.ec, claims(map[string]any{"runner": "-x", "groups": []string{"b"}})), want: codes.JWTNoRule},

		// order/: which code wins when a token fails more than one check.
		{name: "order/issuer-before-signature", raw: sign(t, f.bad, claims(map[string]any{"iss": "https://evil.example"})), want: codes.JWTIssuerUnknown},
		{name: "order/issuer-before-audience", raw: sign(t, f.ec, claims(map[string]any{"iss": "https://evil.example", "aud": "x"})), want: codes.JWTIssuerUnknown},
		{name: "order/signature-before-expiry", raw: sign(t, f.bad, claims(map[string]any{"exp": at(-time.Second)})), want: codes.JWTInvalid},
		{name: "order/audience-before-expiry", raw: sign(t, f.ec, claims(map[string]any{"aud": "x", "iat": at(-10 * time.Minute), "exp": at(-time.Second)})), want: codes.JWTAudience},
		{name: "order/audience-before-no-exp", raw: sign(t, f.ec, claims(map[string]any{"aud": "x", "exp": nil})), want: codes.JWTAudience},
		{name: "order/lifetime-before-expiry", raw: sign(t, f.ec, claims(map[string]any{"iat": at(-3 * time.Hour), "exp": at(-time.Hour)})), want: codes.JWTLifetime},
		{name: "order/lifetime-before-nbf", raw: sign(t, f.ec, claims(map[string]any{"jti": nil, "nbf": at(10 * time.Minute)})), want: codes.JWTLifetime},
		{name: "order/expiry-before-rules", raw: sign(t, f.ec, claims(map[string]any{"repository": "nope", "iat": at(-10 * time.Minute), "exp": at(-time.Second)})), want: codes.JWTExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := f.v.Verify(context.Background(), tc.raw)
			if got := codes.Of(err); got != tc.want {
				t.Fatalf("Verify: code %q (%v), want %q", got, err, tc.want)
			}
			if err != nil {
				t.Log(err)
				noSecrets(t, err, tc.raw)
				if !isZero(id) {
					t.Errorf("Verify failed but returned %+v", id)
				}
				return
			}
			if tc.check != nil {
				tc.check(t, id)
			}
		})
	}
}

// TestVerifyValidName: Deps.ValidName decides which names a name claim
// may give, and its own code does not replace JWTNoRule.
func TestVerifyValidName(t *testing.T) {
	f := newFixture(t)
	var asked []string
	f.deps.ValidName = func(name string) error {
		asked = append(asked, name)
		if name == "ci-7" {
			return codes.Wrap(codes.BadNodeName, errors.New("taken by policy"))
		}
		return nil
	}
	v, err := New(context.Background(), f.issuers, f.deps)
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), sign(t, f.ec, claims(nil)))
	if codes.Of(err) != codes.JWTNoRule {
		t.Fatalf("Verify: %v, want %s", err, codes.JWTNoRule)
	}
	id, err := v.Verify(context.Background(), sign(t, f.ec, claims(map[string]any{"runner": "UPPER"})))
	if err != nil {
		t.Fatalf("Verify with a name the injected check allows: %v", err)
	}
	equal(t, "name", id.Name, "UPPER")
	if !slices.Equal(asked, []string{"ci-7", "UPPER"}) {
		t.Errorf("ValidName asked %q, want [ci-7 UPPER]", asked)
	}
}

// TestVerifyKeepsConfig: New copies the issuers, and an Identity's groups
// are the caller's own, so neither side can change the other's.
func TestVerifyKeepsConfig(t *testing.T) {
	f := newFixture(t)
	f.issuers[0].Rules[0].Role = "worker"
	f.issuers[0].Rules[0].Groups[0] = "changed"
	f.issuers[0].Rules[0].Claims["repository"] = "changed"
	raw := sign(t, f.ec, claims(nil))
	id, err := f.v.Verify(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	id.Groups[0] = "mutated"
	id, err = f.v.Verify(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "role", id.Role, "control")
	if !slices.Equal(id.Groups, []string{"ci", "deploy"}) {
		t.Errorf("groups %q, want [ci deploy]", id.Groups)
	}
}

// TestVerifyClock: the time checks read Deps.Now, and only it.
func TestVerifyClock(t *testing.T) {
	f := newFixture(t)
	c := &clock{now: t0}
	f.deps.Now = c.Now
	v, err := New(context.Background(), f.issuers, f.deps)
	if err != nil {
		t.Fatal(err)
	}
	raw := sign(t, f.ec, claims(nil)) // valid from t0-1m to t0+9m
	for _, step := range []struct {
		advance time.Duration
		want    codes.Code
	}{
		{0, ""},
		{9 * time.Minute, ""},
		{time.Second, codes.JWTExpired},
	} {
		c.Advance(step.advance)
		if _, err := v.Verify(context.Background(), raw); codes.Of(err) != step.want {
			t.Fatalf("at %s: %v, want %q", c.Now().Sub(t0), err, step.want)
		}
	}
}

// TestVerifyConcurrent runs Verify and Reload at once, for the race
// detector.
func TestVerifyConcurrent(t *testing.T) {
	f := newFixture(t)
	raw := sign(t, f.ec, claims(nil))
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 4 {
		wg.Go(func() {
			for range 10 {
				if i == 0 {
					if err := f.v.Reload(context.Background()); err != nil {
						errs <- err
					}
					continue
				}
				if _, err := f.v.Verify(context.Background(), raw); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// noSecrets fails if err's message holds the token or its signature.
func noSecrets(t *testing.T, err error, raw string) {
	t.Helper()
	msg := err.Error()
	if raw = strings.TrimSpace(raw); len(raw) > 16 && strings.Contains(msg, raw) {
		t.Errorf("error holds the raw token: %s", clip(msg))
	}
	if sig := signature(raw); len(sig) > 16 && strings.Contains(msg, sig) {
		t.Errorf("error holds the token's signature: %s", clip(msg))
	}
}

// flip changes the first character of a base64url string.
func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func isZero(id Identity) bool {
	return id.Issuer == "" && id.Subject == "" && id.JTI == "" && id.Role == "" && id.Groups == nil && id.Name == "" &&
		id.NamePrefix == "" && !id.Ephemeral && id.Rule == 0 && id.IssuedAt.IsZero() && id.Expires.IsZero()
}

func same(t *testing.T, got, want Identity) {
	t.Helper()
	g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want)
	if !got.IssuedAt.Equal(want.IssuedAt) || !got.Expires.Equal(want.Expires) {
		t.Errorf("times %s..%s, want %s..%s", got.IssuedAt, got.Expires, want.IssuedAt, want.Expires)
	}
	got.IssuedAt, got.Expires, want.IssuedAt, want.Expires = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("identity\n got %s\nwant %s", g, w)
	}
}

func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s %v, want %v", what, got, want)
	}
}
