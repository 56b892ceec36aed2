// Package idtokentest is a JWT issuer for tests of joins by identity: an
// ECDSA P-256 signing key, its JSON Web Key Set (written to a file, or
// served with an OpenID discovery document), and tokens signed with it
// through go-jose, as a CI platform's OIDC issuer would mint them.
//
// Import rule (deps_test.go): may import nothing of meshd.
package idtokentest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer signs tokens as URL.
type Issuer struct {
	URL string
	key *ecdsa.PrivateKey
	kid string
}

// New is an issuer named url with a fresh key.
func New(t testing.TB, url string) *Issuer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	return &Issuer{URL: url, key: k, kid: hex.EncodeToString(id[:])}
}

// JWKS is the issuer's public key set.
func (i *Issuer) JWKS(t testing.TB) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &i.key.PublicKey, KeyID: i.kid, Algorithm: string(jose.ES256), Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WriteJWKS writes the key set to dir/jwks.json (0644: public keys) and
// returns its path.
func (i *Issuer) WriteJWKS(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(p, i.JWKS(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Handler serves the issuer's discovery document at
// /.well-known/openid-configuration and its key set at /jwks, for an
// issuer whose URL is where it is served.
func (i *Issuer) Handler(t testing.TB) http.Handler {
	jwks := i.JWKS(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": i.URL, "jwks_uri": i.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"ES256"}})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jwks)
	})
	return mux
}

// Claims are a token's: the registered ones this issuer fills in, and
// any others (repository, ref, ...).
type Claims struct {
	Subject  string
	Audience string
	JTI      string
	IssuedAt time.Time
	Life     time.Duration // exp - iat
	Extra    map[string]any
}

// Token is a signed JWT of c.
func (i *Issuer) Token(t testing.TB, c Claims) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: i.key, KeyID: i.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	std := jwt.Claims{Issuer: i.URL, Subject: c.Subject, Audience: jwt.Audience{c.Audience}, ID: c.JTI,
		IssuedAt: jwt.NewNumericDate(c.IssuedAt), NotBefore: jwt.NewNumericDate(c.IssuedAt),
		Expiry: jwt.NewNumericDate(c.IssuedAt.Add(c.Life))}
	raw, err := jwt.Signed(sig).Claims(std).Claims(c.Extra).Serialize()
	if err != nil {
		t.Fatal(fmt.Errorf("sign: %w", err))
	}
	return raw
}
