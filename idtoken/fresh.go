package idtoken

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

const (
	// DefaultKeysMaxAge is how long an issuer's keys are used before they
	// are fetched (discovery) or read (jwks_file) again, when its
	// keys_max_age is not set: a key the issuer withdrew admits for at
	// most this long after the fetch that last served it.
	DefaultKeysMaxAge = 5 * time.Minute
	// MaxKeysMaxAge bounds keys_max_age: a withdrawn key should not admit
	// for days.
	MaxKeysMaxAge = 24 * time.Hour
)

// remoteKeys is a discovery issuer's key set. go-oidc's RemoteKeySet
// keeps the keys it fetched for as long as it lives, and fetches the
// jwks_uri again only for a token none of them verifies: a key the issuer
// withdrew would verify until a token of a key it has not seen made it
// fetch. remoteKeys gives each RemoteKeySet a life: once its keys are
// older than maxAge, or than the max-age of the response they came in if
// that is shorter, current replaces it with a new one, whose first token
// fetches the jwks_uri again.
type remoteKeys struct {
	url    string
	client *http.Client
	now    func() time.Time
	maxAge time.Duration

	mu  sync.Mutex
	gen *keysGen // nil until the first token
}

func newRemoteKeys(url string, client *http.Client, now func() time.Time, maxAge time.Duration) *remoteKeys {
	return &remoteKeys{url: url, client: client, now: now, maxAge: maxAge}
}

// current is the RemoteKeySet to verify a token with now.
func (r *remoteKeys) current() oidc.KeySet {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == nil || r.gen.stale(r.now()) {
		r.gen = r.newGen()
	}
	return r.gen.set
}

// newGen is a RemoteKeySet with nothing fetched yet, whose HTTP client
// notes each key set it receives in the keysGen.
func (r *remoteKeys) newGen() *keysGen {
	g := &keysGen{now: r.now, maxAge: r.maxAge, base: r.client.Transport}
	if g.base == nil {
		g.base = http.DefaultTransport
	}
	c := *r.client
	c.Transport = g
	// RemoteKeySet keeps its context for every fetch, so it gets one that
	// is never cancelled, carrying only the HTTP client.
	g.set = oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), &c), r.url)
	return g
}

// keysGen is one RemoteKeySet and when its keys go stale. It is the
// RoundTripper of that set's fetches, so it sees each response: go-oidc
// fetches in a goroutine of its own and says nothing of the answer's
// headers.
type keysGen struct {
	set    *oidc.RemoteKeySet
	now    func() time.Time
	maxAge time.Duration
	base   http.RoundTripper

	mu      sync.Mutex
	expires time.Time // zero until a key set arrived
}

// RoundTrip fetches as base does, and for a key set served (200) moves
// the expiry to the time the request was sent plus the shorter of maxAge
// and the response's freshness, if that is earlier than it was: a later
// fetch (a token naming a key not seen) never extends the set's life.
func (g *keysGen) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := g.now()
	resp, err := g.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	life := g.maxAge
	if fresh, ok := freshness(resp.Header); ok && fresh < life {
		life = fresh
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if at := sent.Add(life); g.expires.IsZero() || at.Before(g.expires) {
		g.expires = at
	}
	return resp, nil
}

// stale reports whether the keys are too old to verify with at now. A
// set that has fetched nothing is not: its next token fetches.
func (g *keysGen) stale(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.expires.IsZero() && !now.Before(g.expires)
}

// freshness is how long a response may be used by its Cache-Control
// (RFC 9111 §4.2.1): max-age less the Age it spent in caches on the way;
// no-cache or no-store, or a max-age that is not a number, give 0 (fetch
// again at the next token). ok is false when the header sets none of
// them.
func freshness(h http.Header) (d time.Duration, ok bool) {
	age := int64(-1)
	for _, line := range h.Values("Cache-Control") {
		for _, dir := range strings.Split(line, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(dir), "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "no-cache", "no-store":
				return 0, true
			case "max-age":
				n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(val), `"`), 10, 64)
				switch {
				case err != nil || n < 0:
					return 0, true
				case age < 0 || n < age:
					age = n
				}
			}
		}
	}
	if age < 0 {
		return 0, false
	}
	if spent, err := strconv.ParseInt(strings.TrimSpace(h.Get("Age")), 10, 64); err == nil && spent > 0 {
		age -= spent
	}
	if age <= 0 {
		return 0, true
	}
	if age > int64(MaxKeysMaxAge/time.Second) {
		age = int64(MaxKeysMaxAge / time.Second)
	}
	return time.Duration(age) * time.Second, true
}

// fileKeys is a jwks_file issuer's key set: the file is read again by
// the first token after the keys are maxAge old, so keys removed from it
// stop verifying without a reload. A file that cannot be read then
// refuses every token of the issuer until it can: the keys it held are
// not trusted past their age.
type fileKeys struct {
	path   string
	now    func() time.Time
	maxAge time.Duration

	mu     sync.Mutex
	set    *oidc.StaticKeySet
	readAt time.Time
}

// readFileKeys reads path now, for New and Reload.
func readFileKeys(path string, now func() time.Time, maxAge time.Duration) (*fileKeys, error) {
	at := now()
	set, err := loadJWKS(path)
	if err != nil {
		return nil, err
	}
	return &fileKeys{path: path, now: now, maxAge: maxAge, set: set, readAt: at}, nil
}

// current is the key set to verify a token with now, read again if it
// is maxAge old.
func (f *fileKeys) current() (oidc.KeySet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if now.Sub(f.readAt) < f.maxAge {
		return f.set, nil
	}
	set, err := loadJWKS(f.path)
	if err != nil {
		return nil, fmt.Errorf("read %s ago, they cannot be read again: %w", now.Sub(f.readAt).Round(time.Second), err)
	}
	f.set, f.readAt = set, now
	return set, nil
}
