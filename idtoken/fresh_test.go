package idtoken

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/meshd/meshd/codes"
)

// TestWithdrawnKeyDiscovery: the issuer withdraws key A (its jwks_uri
// serves only B). Once the cached set is keys_max_age old (default
// DefaultKeysMaxAge), a token signed by A is refused codes.JWTInvalid;
// B's tokens verify. (That A still verifies from the cache before then
// is TestRemoteKeysLife's: go-oidc stores a fetched set in a goroutine of
// its own, so a test through it cannot tell when the cache holds it.)
func TestWithdrawnKeyDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name   string
		maxAge time.Duration // the issuer's keys_max_age
		bound  time.Duration // the window it gives
	}{
		{"default", 0, DefaultKeysMaxAge},
		{"keys_max_age", 2 * time.Minute, 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newECKey(t, "a"), newRSAKey(t, "b")
			srv := newIssuerServer(t, a, b)
			clk := &clock{now: t0}
			v := discoveryVerifierMaxAge(t, srv, clk, tc.maxAge)
			ctx := context.Background()
			// Tokens valid for the whole test: issued at t0, living 50 minutes.
			tok := func(k testKey) string {
				return sign(t, k, claims(map[string]any{"iss": srv.URL, "exp": t0.Add(50 * time.Minute).Unix()}))
			}
			if _, err := v.Verify(ctx, tok(a)); err != nil {
				t.Fatalf("a, served: %v", err)
			}
			srv.setKeys(t, b)
			clk.Advance(tc.bound)
			if _, err := v.Verify(ctx, tok(a)); codes.Of(err) != codes.JWTInvalid {
				t.Fatalf("a, withdrawn %s ago: %v, want %s", tc.bound, err, codes.JWTInvalid)
			}
			if _, err := v.Verify(ctx, tok(b)); err != nil {
				t.Fatalf("b, still served: %v", err)
			}
			if n := srv.keyFetches.Load(); n < 2 {
				t.Fatalf("key fetches %d, want the set fetched again", n)
			}
		})
	}
}

// TestWithdrawnKeyMaxAge: a key set's Cache-Control max-age shorter than
// keys_max_age is the bound (less the Age it spent in caches); no-cache
// fetches again at every token.
func TestWithdrawnKeyMaxAge(t *testing.T) {
	for _, tc := range []struct {
		name, header, age string
		bound             time.Duration
	}{
		{name: "max-age", header: "public, max-age=60, must-revalidate", bound: time.Minute},
		{name: "max-age-less-age", header: "max-age=60", age: "45", bound: 15 * time.Second},
		{name: "max-age-longer", header: "max-age=86400", bound: DefaultKeysMaxAge},
		{name: "no-cache", header: "no-cache", bound: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newECKey(t, "a"), newECKey(t, "b")
			srv := newIssuerServer(t, a, b)
			srv.setCacheControl(tc.header)
			if tc.age != "" {
				inner := srv.Config.Handler
				srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Age", tc.age)
					inner.ServeHTTP(w, r)
				})
			}
			clk := &clock{now: t0}
			v := discoveryVerifier(t, srv, clk)
			ctx := context.Background()
			raw := sign(t, a, claims(map[string]any{"iss": srv.URL}))
			if _, err := v.Verify(ctx, raw); err != nil {
				t.Fatalf("a, served: %v", err)
			}
			srv.setKeys(t, b)
			clk.Advance(tc.bound)
			if _, err := v.Verify(ctx, raw); codes.Of(err) != codes.JWTInvalid {
				t.Fatalf("a, withdrawn %s ago: %v, want %s", tc.bound, err, codes.JWTInvalid)
			}
		})
	}
}

// TestRemoteKeysLife: a set's keys are used until the shortest life any
// fetch of the set gave them, counted from when that fetch was sent; a
// later fetch (a token naming a key not seen) never extends it, and a
// fetch that did not serve a set (an error status) counts for nothing.
func TestRemoteKeysLife(t *testing.T) {
	var header http.Header
	status := http.StatusOK
	fake := roundTripper(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: header, Body: http.NoBody}, nil
	})
	clk := &clock{now: t0}
	r := newRemoteKeys("https://keys.example/jwks", &http.Client{Transport: fake}, clk.Now, 5*time.Minute)
	req, err := http.NewRequest(http.MethodGet, "https://keys.example/jwks", nil)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() {
		t.Helper()
		if _, err := r.gen.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	same := func(step string, want oidc.KeySet, same bool) oidc.KeySet {
		t.Helper()
		got := r.current()
		if (got == want) != same {
			t.Fatalf("%s: the same set %v, want %v", step, got == want, same)
		}
		return got
	}

	first := r.current()
	clk.Advance(time.Hour)
	same("nothing fetched, an hour on", first, true)
	status = http.StatusServiceUnavailable
	fetch()
	clk.Advance(time.Hour)
	same("a failed fetch, an hour on", first, true)

	status = http.StatusOK
	fetch() // lives 5 minutes
	clk.Advance(2 * time.Minute)
	fetch() // a key not seen: would live 2 minutes longer
	clk.Advance(3*time.Minute - time.Second)
	same("a second before the first fetch's 5 minutes", first, true)
	clk.Advance(time.Second)
	second := same("the first fetch's 5 minutes", first, false)

	header = http.Header{"Cache-Control": {"max-age=60"}}
	fetch()
	clk.Advance(59 * time.Second)
	same("max-age=60, 59 s on", second, true)
	clk.Advance(time.Second)
	same("max-age=60, 60 s on", second, false)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWithdrawnKeyIssuerDown: once the cached set is too old, an issuer
// whose key set cannot be fetched admits nothing (fail closed), and
// admits again when it answers.
func TestWithdrawnKeyIssuerDown(t *testing.T) {
	a := newECKey(t, "a")
	srv := newIssuerServer(t, a)
	clk := &clock{now: t0}
	v := discoveryVerifier(t, srv, clk)
	ctx := context.Background()
	raw := sign(t, a, claims(map[string]any{"iss": srv.URL, "exp": t0.Add(50 * time.Minute).Unix()}))
	if _, err := v.Verify(ctx, raw); err != nil {
		t.Fatal(err)
	}
	srv.keysDown.Store(true)
	clk.Advance(DefaultKeysMaxAge)
	if _, err := v.Verify(ctx, raw); codes.Of(err) != codes.JWTInvalid {
		t.Fatalf("keys too old, issuer down: %v, want %s", err, codes.JWTInvalid)
	}
	// Up again: go-oidc may hand a Verify that follows at once the failed
	// fetch's answer (its in-flight fetch is cleared just after it is
	// answered), so the next fetch is awaited with a deadline.
	srv.keysDown.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for wait := time.Millisecond; ; wait *= 2 {
		_, err := v.Verify(ctx, raw)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("issuer up again: %v", err)
		}
		time.Sleep(wait)
	}
}

// TestWithdrawnKeyFile: a key removed from a jwks_file stops verifying
// once the keys read are keys_max_age old, with no reload; a file that
// cannot be read then refuses every token of the issuer until it can.
func TestWithdrawnKeyFile(t *testing.T) {
	dir := t.TempDir()
	a, b := newECKey(t, "a"), newRSAKey(t, "b")
	path := writeJWKS(t, dir, "ci.json", a, b)
	clk := &clock{now: t0}
	const maxAge = 3 * time.Minute
	v, err := New(context.Background(), []Issuer{{Issuer: testIssuer, JWKSFile: path, Audience: testAudience,
		Rules: testRules(), KeysMaxAge: maxAge}}, Deps{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tokA := sign(t, a, claims(map[string]any{"exp": t0.Add(50 * time.Minute).Unix()}))
	tokB := sign(t, b, claims(map[string]any{"exp": t0.Add(50 * time.Minute).Unix()}))
	verify := func(step, raw string, want codes.Code) {
		t.Helper()
		if _, err := v.Verify(ctx, raw); codes.Of(err) != want {
			t.Fatalf("%s: %v, want %q", step, err, want)
		}
	}
	verify("a before", tokA, "")
	writeJWKS(t, dir, "ci.json", b)
	clk.Advance(maxAge - time.Second)
	verify("a withdrawn, a second before the bound", tokA, "")
	clk.Advance(time.Second)
	verify("a withdrawn, at the bound", tokA, codes.JWTInvalid)
	verify("b", tokB, "")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.Advance(maxAge)
	verify("b, the file gone", tokB, codes.JWTInvalid)
	writeJWKS(t, dir, "ci.json", b)
	verify("b, the file back", tokB, "")
}

func TestFreshness(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"none", http.Header{}, 0, false},
		{"public-only", http.Header{"Cache-Control": {"public"}}, 0, false},
		{"max-age", http.Header{"Cache-Control": {"public, max-age=120"}}, 2 * time.Minute, true},
		{"max-age-case", http.Header{"Cache-Control": {"Max-Age=120"}}, 2 * time.Minute, true},
		{"max-age-quoted", http.Header{"Cache-Control": {`max-age="120"`}}, 2 * time.Minute, true},
		{"two-lines-shorter-wins", http.Header{"Cache-Control": {"max-age=300", "max-age=30"}}, 30 * time.Second, true},
		{"age", http.Header{"Cache-Control": {"max-age=120"}, "Age": {"20"}}, 100 * time.Second, true},
		{"age-past", http.Header{"Cache-Control": {"max-age=120"}, "Age": {"200"}}, 0, true},
		{"age-without-max-age", http.Header{"Age": {"20"}}, 0, false},
		{"max-age-bad", http.Header{"Cache-Control": {"max-age=soon"}}, 0, true},
		{"max-age-negative", http.Header{"Cache-Control": {"max-age=-5"}}, 0, true},
		{"max-age-huge", http.Header{"Cache-Control": {"max-age=99999999999999"}}, MaxKeysMaxAge, true},
		{"no-cache", http.Header{"Cache-Control": {"max-age=600, no-cache"}}, 0, true},
		{"no-store", http.Header{"Cache-Control": {"no-store"}}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := freshness(tc.header)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("freshness(%v) = %s, %v; want %s, %v", tc.header, got, ok, tc.want, tc.ok)
			}
		})
	}
}
