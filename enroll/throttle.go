package enroll

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/meshd/meshd/codes"
)

// Defaults of the failed-token throttle (ServerConfig).
const (
	DefaultFailLimit  = 10          // failed token attempts a source may make per window
	DefaultFailWindow = time.Minute // how long a source's failures count
	DefaultMaxSources = 4096        // sources tracked at once
	MaxMaxSources     = 1 << 20     // the most Validate allows: bounds the table's memory
)

// throttle counts failed token attempts per source and refuses a source
// that has failed limit times within its window. A source's window opens
// with its first failure and closes window later, whatever happens in
// between: refused (throttled) attempts neither count nor extend it, and a
// success does not reset it. The table holds at most max sources: when it
// is full, closed windows are dropped, then the oldest open one.
//
// A source is an IPv4 address or an IPv6 /64: whoever holds one IPv6
// address usually holds its whole /64.
type throttle struct {
	limit  int
	window time.Duration
	max    int

	mu      sync.Mutex
	sources map[netip.Prefix]*failures
}

// failures is one source's current window.
type failures struct {
	since  time.Time // the window's first failure
	count  int
	logged bool // a throttled attempt has been logged in this window
}

func newThrottle(limit int, window time.Duration, maxSources int) *throttle {
	return &throttle{limit: limit, window: window, max: maxSources, sources: make(map[netip.Prefix]*failures)}
}

// sourceKey is what the throttle counts by: the IPv4 address, or the /64
// of an IPv6 address.
func sourceKey(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64) // a is IPv6 or invalid: 64 bits always fit
	return p
}

// open reports whether f's window is still open at now.
func (t *throttle) open(f *failures, now time.Time) bool { return now.Before(f.since.Add(t.window)) }

// check reports whether source is throttled at now, and whether this is
// the first throttled attempt of its window (the one to log).
func (t *throttle) check(source netip.Addr, now time.Time) (throttled, first bool, f failures) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.sources[sourceKey(source)]
	if e == nil || !t.open(e, now) || e.count < t.limit {
		return false, false, failures{}
	}
	first = !e.logged
	e.logged = true
	return true, first, *e
}

// fail counts a failed token attempt by source at now.
func (t *throttle) fail(source netip.Addr, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := sourceKey(source)
	if e := t.sources[key]; e != nil {
		if t.open(e, now) {
			e.count++
		} else {
			*e = failures{since: now, count: 1}
		}
		return
	}
	if len(t.sources) >= t.max {
		t.evict(now)
	}
	t.sources[key] = &failures{since: now, count: 1}
}

// evict makes room for one source: it drops every closed window, and the
// oldest open one if that freed nothing.
func (t *throttle) evict(now time.Time) {
	var (
		oldest      netip.Prefix
		oldestSince time.Time
		found       bool
	)
	for k, e := range t.sources {
		if !t.open(e, now) {
			delete(t.sources, k)
			continue
		}
		if !found || e.since.Before(oldestSince) {
			oldest, oldestSince, found = k, e.since, true
		}
	}
	if len(t.sources) >= t.max {
		delete(t.sources, oldest)
	}
}

// size is the number of sources tracked.
func (t *throttle) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sources)
}

// errBadSecret is a token secret that is not a JSON string of 32 bytes in
// base64url: the caller's fault, counted by the throttle.
var errBadSecret = errors.New("secret: want 32 bytes, base64url, as a JSON string")

// tokenFault reports whether err is a failed token attempt: the caller's
// fault about the token (unknown, consumed, expired, revoked, for another
// name or address, corrupt). Failures of this node or the cluster (no
// leader, CA holder down, ...) and faults in the rest of the request are
// not.
func tokenFault(err error) bool {
	switch codes.Of(err) {
	case codes.TokenUnknown, codes.TokenConsumed, codes.TokenExpired, codes.TokenRevoked,
		codes.TokenNameDiffer, codes.TokenWrongAddr, codes.TokenCorrupt, codes.TokenVersion,
		codes.ApprovalBurnt, codes.ApprovalTimeout, codes.KeyExhausted,
		codes.JWTInvalid, codes.JWTIssuerUnknown, codes.JWTAudience, codes.JWTExpired, codes.JWTLifetime,
		codes.JWTReplayed, codes.JWTNoRule:
		return true
	}
	return errors.Is(err, errBadSecret)
}
