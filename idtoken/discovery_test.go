package idtoken

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// issuerServer is an OpenID Connect issuer over TLS: its discovery
// document and its key set, which a test can rotate, break or take down.
type issuerServer struct {
	*httptest.Server
	claimIssuer string // the discovery document's issuer; "" is the server's URL

	mu           sync.Mutex
	keys         []byte // the JWKS served
	cacheControl string // the key set's Cache-Control header; "": none

	discoveryDown, keysDown atomic.Bool
	discoveries, keyFetches atomic.Int32
}

func newIssuerServer(t *testing.T, keys ...testKey) *issuerServer {
	t.Helper()
	s := &issuerServer{}
	s.setKeys(t, keys...)
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		s.discoveries.Add(1)
		if s.discoveryDown.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		iss := s.claimIssuer
		if iss == "" {
			iss = s.URL
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                iss,
			"jwks_uri":                              s.URL + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		s.keyFetches.Add(1)
		if s.keysDown.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if s.cacheControl != "" {
			w.Header().Set("Cache-Control", s.cacheControl)
		}
		w.Write(s.keys)
	})
	s.Server = httptest.NewTLSServer(mux)
	t.Cleanup(s.Close)
	return s
}

// setKeys replaces the key set the server serves (the issuer rotated).
func (s *issuerServer) setKeys(t *testing.T, keys ...testKey) {
	b := jwks(t, keys...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = b
}

// setCacheControl sets the Cache-Control header the key set is served
// with; "" serves none.
func (s *issuerServer) setCacheControl(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cacheControl = v
}

// discoveryVerifier trusts srv's issuer by discovery, on clock c.
func discoveryVerifier(t *testing.T, srv *issuerServer, c *clock) *Verifier {
	t.Helper()
	return discoveryVerifierMaxAge(t, srv, c, 0)
}

// discoveryVerifierMaxAge is discoveryVerifier with the issuer's
// keys_max_age.
func discoveryVerifierMaxAge(t *testing.T, srv *issuerServer, c *clock, maxAge time.Duration) *Verifier {
	t.Helper()
	v, err := New(context.Background(),
		[]Issuer{{Issuer: srv.URL, Discovery: true, Audience: testAudience, Rules: testRules(), KeysMaxAge: maxAge}},
		Deps{Now: c.Now, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDiscovery(t *testing.T) {
	k1 := newECKey(t, "d-1")
	srv := newIssuerServer(t, k1)
	v := discoveryVerifier(t, srv, &clock{now: t0})
	if n := srv.discoveries.Load(); n != 0 {
		t.Fatalf("New asked the issuer %d times; want none before a token names it", n)
	}
	ctx := context.Background()
	for range 2 {
		id, err := v.Verify(ctx, sign(t, k1, claims(map[string]any{"iss": srv.URL})))
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		equal(t, "issuer", id.Issuer, srv.URL)
		equal(t, "name", id.Name, "ci-7")
	}
	equal(t, "discoveries", srv.discoveries.Load(), 1)
	equal(t, "key fetches", srv.keyFetches.Load(), 1)

	// The issuer rotates to k2: a token naming it makes go-oidc fetch the
	// key set again.
	k2 := newRSAKey(t, "d-2")
	srv.setKeys(t, k1, k2)
	if _, err := v.Verify(ctx, sign(t, k2, claims(map[string]any{"iss": srv.URL}))); err != nil {
		t.Fatalf("Verify with the rotated key: %v", err)
	}
	equal(t, "key fetches", srv.keyFetches.Load(), 2)

	for name, tc := range map[string]struct {
		raw  string
		want codes.Code
	}{
		"unknown-key": {sign(t, newECKey(t, "d-9"), claims(map[string]any{"iss": srv.URL})), codes.JWTInvalid},
		"audience":    {sign(t, k1, claims(map[string]any{"iss": srv.URL, "aud": "x"})), codes.JWTAudience},
		"expired":     {sign(t, k1, claims(map[string]any{"iss": srv.URL, "exp": t0.Add(-time.Second).Unix()})), codes.JWTExpired},
		"no-jti":      {sign(t, k1, claims(map[string]any{"iss": srv.URL, "jti": nil})), codes.JWTLifetime},
	} {
		if _, err := v.Verify(ctx, tc.raw); codes.Of(err) != tc.want {
			t.Errorf("%s: %v, want %s", name, err, tc.want)
		}
	}
}

// TestDiscoveryDownAtNew: an issuer that cannot be reached does not fail
// New; its tokens fail with codes.JWTInvalid.
func TestDiscoveryDownAtNew(t *testing.T) {
	k := newECKey(t, "d-1")
	srv := newIssuerServer(t, k)
	srv.Close()
	v := discoveryVerifier(t, srv, &clock{now: t0})
	_, err := v.Verify(context.Background(), sign(t, k, claims(map[string]any{"iss": srv.URL})))
	if codes.Of(err) != codes.JWTInvalid {
		t.Fatalf("Verify: %v, want %s", err, codes.JWTInvalid)
	}
	t.Log(err)
}

// TestDiscoveryRetry: a failed discovery is remembered for
// discoveryRetry, so an issuer that is down is not asked at every join,
// and tried again after it.
func TestDiscoveryRetry(t *testing.T) {
	k := newECKey(t, "d-1")
	srv := newIssuerServer(t, k)
	srv.discoveryDown.Store(true)
	c := &clock{now: t0}
	v := discoveryVerifier(t, srv, c)
	raw := sign(t, k, claims(map[string]any{"iss": srv.URL}))
	ctx := context.Background()
	for i, step := range []struct {
		advance     time.Duration
		up          bool
		want        codes.Code
		discoveries int32
	}{
		{0, false, codes.JWTInvalid, 1},
		{time.Second, false, codes.JWTInvalid, 1},
		{0, true, codes.JWTInvalid, 1}, // up again, but the failure is remembered
		{discoveryRetry - time.Second, true, "", 2},
		{time.Minute, true, "", 2}, // found: not asked again
	} {
		c.Advance(step.advance)
		srv.discoveryDown.Store(!step.up)
		if _, err := v.Verify(ctx, raw); codes.Of(err) != step.want {
			t.Fatalf("step %d: %v, want %q", i, err, step.want)
		}
		equal(t, "discoveries", srv.discoveries.Load(), step.discoveries)
	}
}

// TestDiscoveryRefused: a discovery document naming another issuer, or a
// key set that cannot be fetched, fails the token with codes.JWTInvalid.
func TestDiscoveryRefused(t *testing.T) {
	k := newECKey(t, "d-1")
	t.Run("issuer-mismatch", func(t *testing.T) {
		srv := newIssuerServer(t, k)
		srv.claimIssuer = "https://elsewhere.example"
		v := discoveryVerifier(t, srv, &clock{now: t0})
		_, err := v.Verify(context.Background(), sign(t, k, claims(map[string]any{"iss": srv.URL})))
		if codes.Of(err) != codes.JWTInvalid {
			t.Fatalf("Verify: %v, want %s", err, codes.JWTInvalid)
		}
		t.Log(err)
	})
	t.Run("keys-down", func(t *testing.T) {
		srv := newIssuerServer(t, k)
		srv.keysDown.Store(true)
		v := discoveryVerifier(t, srv, &clock{now: t0})
		_, err := v.Verify(context.Background(), sign(t, k, claims(map[string]any{"iss": srv.URL})))
		if codes.Of(err) != codes.JWTInvalid {
			t.Fatalf("Verify: %v, want %s", err, codes.JWTInvalid)
		}
		t.Log(err)
	})
}

// gateFirstDiscovery holds srv's first discovery request until release
// is closed; entered is closed when it arrives.
func gateFirstDiscovery(srv *issuerServer) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	inner := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/openid-configuration" && first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		inner.ServeHTTP(w, r)
	})
	return entered, release
}

// TestDiscoveryContext: a Verify waiting for another's discovery returns
// when its context ends, and a discovery its caller cut short is not
// remembered as the issuer's failure.
func TestDiscoveryContext(t *testing.T) {
	k := newECKey(t, "d-1")
	t.Run("waiting", func(t *testing.T) {
		srv := newIssuerServer(t, k)
		entered, release := gateFirstDiscovery(srv)
		v := discoveryVerifier(t, srv, &clock{now: t0})
		raw := sign(t, k, claims(map[string]any{"iss": srv.URL}))
		first := make(chan error, 1)
		go func() {
			_, err := v.Verify(context.Background(), raw)
			first <- err
		}()
		<-entered // the first Verify is discovering
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := v.Verify(ctx, raw); codes.Of(err) != codes.JWTInvalid {
			t.Errorf("Verify with an ended context while another discovers: %v, want %s", err, codes.JWTInvalid)
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatalf("the discovering Verify: %v", err)
		}
	})
	t.Run("cut-short", func(t *testing.T) {
		srv := newIssuerServer(t, k)
		entered, release := gateFirstDiscovery(srv)
		defer close(release)
		v := discoveryVerifier(t, srv, &clock{now: t0})
		raw := sign(t, k, claims(map[string]any{"iss": srv.URL}))
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() {
			_, err := v.Verify(ctx, raw)
			first <- err
		}()
		<-entered
		cancel()
		if err := <-first; codes.Of(err) != codes.JWTInvalid {
			t.Fatalf("Verify cut short: %v, want %s", err, codes.JWTInvalid)
		}
		if _, err := v.Verify(context.Background(), raw); err != nil {
			t.Fatalf("Verify after a discovery cut short, the clock not moved: %v", err)
		}
	})
}
