package idtoken

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestReload: the issuer rotates its key; the new key's tokens fail
// until Reload reads the file again, then pass, and the old key's fail.
// A Reload that cannot read the file keeps the keys it had.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	oldKey, newKey := newECKey(t, "2026-11"), newRSAKey(t, "2026-12")
	path := writeJWKS(t, dir, "ci.json", oldKey)
	v, err := New(context.Background(), []Issuer{{Issuer: testIssuer, JWKSFile: path, Audience: testAudience, Rules: testRules()}},
		Deps{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	oldTok, newTok := sign(t, oldKey, claims(nil)), sign(t, newKey, claims(nil))
	verify := func(step, raw string, want codes.Code) {
		t.Helper()
		if _, err := v.Verify(ctx, raw); codes.Of(err) != want {
			t.Fatalf("%s: %v, want %q", step, err, want)
		}
	}
	verify("old key before rotation", oldTok, "")
	verify("new key before rotation", newTok, codes.JWTInvalid)

	writeJWKS(t, dir, "ci.json", newKey)
	verify("new key, file rotated, before Reload", newTok, codes.JWTInvalid)
	if err := v.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	verify("new key after Reload", newTok, "")
	verify("old key after Reload", oldTok, codes.JWTInvalid)

	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.Reload(ctx); codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("Reload of a broken file: %v, want %s", err, codes.ConfigInvalid)
	}
	verify("new key after a failed Reload", newTok, "")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := v.Reload(ctx); codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("Reload of a missing file: %v, want %s", err, codes.ConfigInvalid)
	}
	verify("new key after a failed Reload", newTok, "")
}

// TestReloadAllOrNothing: with two issuers, one file failing leaves both
// issuers' keys as they were.
func TestReloadAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	a1, a2, b := newECKey(t, "a1"), newECKey(t, "a2"), newECKey(t, "b")
	pathA, pathB := writeJWKS(t, dir, "a.json", a1), writeJWKS(t, dir, "b.json", b)
	v, err := New(context.Background(), []Issuer{
		{Issuer: testIssuer, JWKSFile: pathA, Audience: testAudience, Rules: testRules()},
		{Issuer: k8sIssuer, JWKSFile: pathB, Audience: testAudience, Rules: []Rule{{NamePrefix: "k8s-"}}},
	}, Deps{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	writeJWKS(t, dir, "a.json", a2)
	if err := os.Remove(filepath.Join(dir, "b.json")); err != nil {
		t.Fatal(err)
	}
	if err := v.Reload(context.Background()); codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("Reload: %v, want %s", err, codes.ConfigInvalid)
	}
	if _, err := v.Verify(context.Background(), sign(t, a1, claims(nil))); err != nil {
		t.Errorf("the first issuer's old key after a failed Reload: %v", err)
	}
	if _, err := v.Verify(context.Background(), sign(t, a2, claims(nil))); codes.Of(err) != codes.JWTInvalid {
		t.Errorf("the first issuer's new key after a failed Reload: %v, want %s", err, codes.JWTInvalid)
	}
}

// TestReloadForgetsDiscovery: after Reload, a discovery issuer is
// discovered again at its next token.
func TestReloadForgetsDiscovery(t *testing.T) {
	k := newECKey(t, "d-1")
	srv := newIssuerServer(t, k)
	v := discoveryVerifier(t, srv, &clock{now: t0})
	raw := sign(t, k, claims(map[string]any{"iss": srv.URL}))
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	if err := v.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	equal(t, "discoveries before a token", srv.discoveries.Load(), 1)
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	equal(t, "discoveries", srv.discoveries.Load(), 2)
}
