package idtoken

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// maxJWKSFile bounds a jwks_file: a key set of a few dozen RSA-4096 keys
// is well under it.
const maxJWKSFile = 1 << 20

// discoveryRetry is how long a failed discovery is remembered: Verify
// calls in that time fail at once with its error instead of each asking
// an issuer that is down.
const discoveryRetry = 10 * time.Second

// loadJWKS reads a JSON Web Key Set file into the static key set go-oidc
// verifies with. Only public signature keys are taken: a private or
// symmetric key, a key for encryption or an empty set is refused, so a
// file that cannot be what the operator meant fails at New or Reload,
// not at each join.
func loadJWKS(path string) (*oidc.StaticKeySet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("jwks_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxJWKSFile+1))
	if err != nil {
		return nil, fmt.Errorf("jwks_file %s: %w", path, err)
	}
	if len(b) > maxJWKSFile {
		return nil, fmt.Errorf("jwks_file %s: larger than %d bytes", path, maxJWKSFile)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("jwks_file %s: not a JSON Web Key Set: %v", path, err)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("jwks_file %s: no keys", path)
	}
	keys := make([]crypto.PublicKey, 0, len(set.Keys))
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			return nil, fmt.Errorf("jwks_file %s: key %d (kid %q) is for use %q, not sig", path, i, k.KeyID, k.Use)
		}
		switch pub := k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			keys = append(keys, pub)
		case []byte:
			return nil, fmt.Errorf("jwks_file %s: key %d (kid %q) is a symmetric key; only public keys verify a join's JWT", path, i, k.KeyID)
		default:
			return nil, fmt.Errorf("jwks_file %s: key %d (kid %q) is a %T; give the issuer's public keys only", path, i, k.KeyID, pub)
		}
	}
	return &oidc.StaticKeySet{PublicKeys: keys}, nil
}

// discovery is a discovery issuer's key set, found at the first Verify
// that needs it: an issuer that is down when meshd starts fails the joins
// that name it, not the start. The key set is go-oidc's RemoteKeySet,
// which fetches the jwks_uri again when a token names a key it has not
// seen (the issuer rotated its keys), renewed by remoteKeys once its keys
// are keysMaxAge old (the issuer withdrew one). The discovery document
// itself is kept until Reload.
type discovery struct {
	issuer     string
	client     *http.Client
	now        func() time.Time
	keysMaxAge time.Duration

	// turn is held by the one call discovering; the others wait for it or
	// for their context to end. It guards the fields below.
	turn     chan struct{}
	keys     *remoteKeys // nil until discovered
	failed   error       // the last failed discovery, retried after discoveryRetry
	failedAt time.Time
}

func newDiscovery(issuer string, client *http.Client, now func() time.Time, keysMaxAge time.Duration) *discovery {
	return &discovery{issuer: issuer, client: client, now: now, keysMaxAge: keysMaxAge, turn: make(chan struct{}, 1)}
}

// keySet returns the issuer's key set, discovering it if need be. A
// discovery cut short by the caller's context is not remembered as the
// issuer's failure.
func (d *discovery) keySet(ctx context.Context) (oidc.KeySet, error) {
	select {
	case d.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.turn }()
	if d.keys != nil {
		return d.keys.current(), nil
	}
	if d.failed != nil && d.now().Sub(d.failedAt) < discoveryRetry {
		return nil, d.failed
	}
	jwksURI, err := d.discover(ctx)
	if err != nil {
		err = fmt.Errorf("it cannot be discovered: %w", err)
		if ctx.Err() == nil {
			d.failed, d.failedAt = err, d.now()
		}
		return nil, err
	}
	d.keys, d.failed = newRemoteKeys(jwksURI, d.client, d.now, d.keysMaxAge), nil
	return d.keys.current(), nil
}

// discover fetches the issuer's discovery document with go-oidc, which
// refuses one naming another issuer, and returns its jwks_uri.
func (d *discovery) discover(ctx context.Context) (string, error) {
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, d.client), d.issuer)
	if err != nil {
		return "", err
	}
	var meta struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := p.Claims(&meta); err != nil {
		return "", err
	}
	if err := httpsURL(meta.JWKSURI); err != nil {
		return "", fmt.Errorf("the discovery document's jwks_uri: %w", err)
	}
	return meta.JWKSURI, nil
}

// errNoKeySet is returned for an issuer with neither a key file nor
// discovery, which Validate refuses; it guards against a zero trusted.
var errNoKeySet = errors.New("issuer has no key set")
