package idtoken

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/meshd/meshd/codes"
)

// TestNewRefusesKeyFiles: a jwks_file that cannot verify a join's token
// fails New with codes.ConfigInvalid, not each join later.
func TestNewRefusesKeyFiles(t *testing.T) {
	dir := t.TempDir()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	set := func(keys ...jose.JSONWebKey) string {
		b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name string
		file string // "" for no file at all
		ok   bool
	}{
		{name: "ok/public-ec", file: set(jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "a", Algorithm: "ES256", Use: "sig"}), ok: true},
		{name: "ok/no-use", file: set(jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "a"}), ok: true},
		{name: "fail/missing"},
		{name: "fail/not-json", file: "-----BEGIN PUBLIC KEY-----"},
		{name: "fail/no-keys", file: `{"keys":[]}`},
		{name: "fail/private-key", file: set(jose.JSONWebKey{Key: ec, KeyID: "a", Algorithm: "ES256"})},
		{name: "fail/symmetric-key", file: set(jose.JSONWebKey{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "h", Algorithm: "HS256"})},
		{name: "fail/encryption-key", file: set(jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "a", Use: "enc"})},
		{name: "fail/too-large", file: `{"keys":[]}` + strings.Repeat(" ", maxJWKSFile)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, "/", "-")+".json")
			if tc.file != "" {
				if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := New(context.Background(), []Issuer{{Issuer: "x", JWKSFile: path, Audience: "a", Rules: []Rule{{NamePrefix: "n-"}}}}, Deps{})
			switch {
			case tc.ok && err != nil:
				t.Fatalf("New: %v", err)
			case !tc.ok && codes.Of(err) != codes.ConfigInvalid:
				t.Fatalf("New: code %q (%v), want %s", codes.Of(err), err, codes.ConfigInvalid)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// TestNewValidates: New refuses what Validate refuses.
func TestNewValidates(t *testing.T) {
	is := goodIssuers()
	is[0].Rules = nil
	if _, err := New(context.Background(), is, Deps{}); codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("New: %v, want %s", err, codes.ConfigInvalid)
	}
}
