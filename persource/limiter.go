// Package persource bounds how often one source address is served: a
// fixed window per source, over a table of sources bounded in size. The
// STUN responder (netcheck) and the DNS server (names) answer unauthenticated
// UDP with it.
//
// Import rule (deps_test.go): may import no meshd package.
package persource

import (
	"net/netip"
	"sync"
	"time"
)

// Limits bound what one window serves.
type Limits struct {
	// PerSource is how many requests one source IP is served per Window;
	// the rest are refused. Zero: 20.
	PerSource int
	// Window is the rate's window. Zero: 1 s.
	Window time.Duration
	// MaxSources bounds the sources tracked in one window; a new source
	// past it is refused until the window turns. Zero: 4096.
	MaxSources int
}

// WithDefaults fills the zero fields with their defaults.
func (l Limits) WithDefaults() Limits {
	if l.PerSource <= 0 {
		l.PerSource = 20
	}
	if l.Window <= 0 {
		l.Window = time.Second
	}
	if l.MaxSources <= 0 {
		l.MaxSources = 4096
	}
	return l
}

// Limiter counts requests per source in fixed windows. Safe for
// concurrent use.
type Limiter struct {
	limits Limits
	now    func() time.Time

	mu        sync.Mutex
	windowEnd time.Time
	seen      map[netip.Addr]int
}

// New is a limiter within limits (zero fields take their defaults); now
// is its clock (nil: time.Now).
func New(limits Limits, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{limits: limits.WithDefaults(), now: now, seen: map[netip.Addr]int{}}
}

// Limits are the limiter's limits, defaults filled in.
func (l *Limiter) Limits() Limits { return l.limits }

// Allow counts a request from src in the current window and says whether
// it is within the source's rate and the table's bound. src is unmapped
// first, so an IPv4 source counts once whichever socket family it came in on.
func (l *Limiter) Allow(src netip.Addr) bool {
	src = src.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !now.Before(l.windowEnd) {
		clear(l.seen)
		l.windowEnd = now.Add(l.limits.Window)
	}
	n, known := l.seen[src]
	if !known && len(l.seen) >= l.limits.MaxSources {
		return false
	}
	if n >= l.limits.PerSource {
		return false
	}
	l.seen[src] = n + 1
	return true
}
