package pathup

import (
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestStepSaysWhenToLookAgain: a look returns the time of the next try
// due (the first backoff step for a peer just seen relayed, the next
// step after a failed try) and no time at all when nothing is relayed or
// every relayed peer is ruled out (NoDirect): Run then sleeps until a
// change, with no timer (issue 54: it used to look four times a second
// whatever happened).
func TestStepSaysWhenToLookAgain(t *testing.T) {
	ov := &fakeOverlay{cands: map[netip.Addr][]netip.AddrPort{peerB: {pubB}},
		open: map[netip.Addr]netip.AddrPort{}, pointed: map[netip.Addr]netip.AddrPort{}, noDirect: map[netip.Addr]string{}}
	u, now := newTest(ov)
	if next := u.Step(t.Context()); !next.IsZero() {
		t.Fatalf("nothing relayed: next look at %v, want none", next)
	}
	ov.relayed = []netip.Addr{peerB}
	if next, want := u.Step(t.Context()), now.Add(u.cfg.Backoff[0]); !next.Equal(want) {
		t.Fatalf("a peer just relayed: next look at %v, want %v (its first try)", next, want)
	}
	*now = now.Add(u.cfg.Backoff[0])
	if next, want := u.Step(t.Context()), now.Add(u.cfg.Backoff[1]); !next.Equal(want) || len(ov.rebuilds) != 1 {
		t.Fatalf("after a failed try: next look at %v, %d rebuilds; want %v, 1", next, len(ov.rebuilds), want)
	}
	ov.noDirect[peerB] = "both behind NATs, this one symmetric"
	if next := u.Step(t.Context()); !next.IsZero() {
		t.Fatalf("the one relayed peer ruled out: next look at %v, want none", next)
	}
}

// countingOverlay counts Run's looks and lets the test ring its changes.
type countingOverlay struct {
	mu    sync.Mutex
	looks int
	wake  chan struct{}
	seen  chan int // each look's number
}

func (c *countingOverlay) Relayed() []netip.Addr {
	c.mu.Lock()
	c.looks++
	n := c.looks
	c.mu.Unlock()
	c.seen <- n
	return nil
}
func (c *countingOverlay) Candidates(netip.Addr) []netip.AddrPort    { return nil }
func (c *countingOverlay) UseDirect(netip.Addr, netip.AddrPort) bool { return false }
func (c *countingOverlay) Rebuild(netip.Addr)                        {}
func (c *countingOverlay) NoDirect(netip.Addr) (string, bool)        { return "", false }
func (c *countingOverlay) Changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wake
}
func (c *countingOverlay) ring() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.wake)
	c.wake = make(chan struct{})
}

// TestRunLooksOnChanges: Run looks once at start and then once per
// change it is told of.
func TestRunLooksOnChanges(t *testing.T) {
	ov := &countingOverlay{wake: make(chan struct{}), seen: make(chan int, 8)}
	u := New(DefaultConfig(), netip.MustParseAddr("10.42.0.2"), ov, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	go u.Run(t.Context())
	look := func(want int) {
		t.Helper()
		select {
		case n := <-ov.seen:
			if n != want {
				t.Fatalf("look %d, want %d", n, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("look %d not made within 5 s", want)
		}
	}
	look(1)
	ov.ring()
	look(2)
	ov.ring()
	look(3)
}
