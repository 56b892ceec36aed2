package member

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/codes"
)

// probeFake stands in for reachOverlay: each address answers or not as
// set, and every probe is counted; with hold set, probes wait for it to
// close (or for their context).
type probeFake struct {
	mu      sync.Mutex
	now     time.Time
	up      map[netip.Addr]bool
	calls   map[netip.Addr]int
	seen    map[string]time.Time // gossip.LastSeen
	hold    chan struct{}
	logs    bytes.Buffer
	logsMu  sync.Mutex
	stopped int // probes that ended with their context
}

func newProbeFake() *probeFake {
	return &probeFake{now: time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC), up: map[netip.Addr]bool{},
		calls: map[netip.Addr]int{}, seen: map[string]time.Time{}}
}

func (f *probeFake) reach(ctx context.Context, addr netip.Addr) error {
	f.mu.Lock()
	f.calls[addr]++
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			f.mu.Lock()
			f.stopped++
			f.mu.Unlock()
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.up[addr] {
		return nil
	}
	return errors.New("i/o timeout")
}

func (f *probeFake) clock() time.Time    { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *probeFake) add(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }
func (f *probeFake) lastSeen(name string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.seen[name]
	return at, ok
}
func (f *probeFake) count(a netip.Addr) int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls[a] }

func (f *probeFake) Write(p []byte) (int, error) {
	f.logsMu.Lock()
	defer f.logsMu.Unlock()
	return f.logs.Write(p)
}
func (f *probeFake) logged() string { f.logsMu.Lock(); defer f.logsMu.Unlock(); return f.logs.String() }

func (f *probeFake) evidence() *evidence {
	return newEvidence(f.reach, 2*time.Second, f.clock, slog.New(slog.NewTextHandler(f, nil)))
}

// settle waits until e has no probe under way.
func settle(t *testing.T, e *evidence) {
	t.Helper()
	waitUntil(t, 5*time.Second, "the probes end", func() bool { e.mu.Lock(); defer e.mu.Unlock(); return e.running == 0 })
}

func rec(name, addr string) desired.Record {
	return desired.Record{ID: "id-" + name, Name: name, Overlay: netip.MustParseAddr(addr)}
}

// TestEvidence: a member gossip doubts is probed once per claim and the
// answer stands as long as it should; the probes are bounded and end
// with close.
func TestEvidence(t *testing.T) {
	w1 := rec("w1", "10.42.0.3")
	t.Run("ok/answer-stands-then-is-asked-again", func(t *testing.T) {
		f := newProbeFake()
		f.up[w1.Overlay] = true
		e := f.evidence()
		defer e.close()
		if got := e.judge([]desired.Record{w1}, f.lastSeen)["w1"]; got != desired.ProbeAnswered {
			t.Fatalf("first look: %v, want answered: the look waits for the first probe of a node that is up", got)
		}
		settle(t, e)
		for range 10 { // a forger's stream: the member flaps, every look doubts it anew
			f.mu.Lock()
			f.seen["w1"] = f.now
			f.mu.Unlock()
			f.add(100 * time.Millisecond)
			if got := e.judge([]desired.Record{w1}, f.lastSeen)["w1"]; got != desired.ProbeAnswered {
				t.Fatalf("after the answer: %v, want answered", got)
			}
		}
		if n := f.count(w1.Overlay); n != 1 {
			t.Fatalf("%d probes within evidenceFresh, want 1", n)
		}
		f.add(evidenceFresh)
		f.mu.Lock()
		f.hold = make(chan struct{})
		f.mu.Unlock()
		if got := e.judge([]desired.Record{w1}, f.lastSeen)["w1"]; got != desired.ProbeAnswered {
			t.Fatalf("while probed again: %v, want the last answer", got)
		}
		close(f.hold)
		settle(t, e)
		if n := f.count(w1.Overlay); n != 2 {
			t.Fatalf("%d probes after evidenceFresh, want 2", n)
		}
		if n := strings.Count(f.logged(), string(codes.GossipContradicted)); n != 1 {
			t.Fatalf("%d %s lines, want 1 (once per member):\n%s", n, codes.GossipContradicted, f.logged())
		}
	})
	t.Run("ok/failure-stands-until-reported-down-again", func(t *testing.T) {
		f := newProbeFake()
		f.seen["w1"] = f.clock().Add(-time.Second) // gossip learned it failed a second ago
		e := f.evidence()
		defer e.close()
		e.judge([]desired.Record{w1}, f.lastSeen)
		settle(t, e)
		for range 5 {
			f.add(time.Minute / 2) // a dead node: no new probe, however long
			if got := e.judge([]desired.Record{w1}, f.lastSeen)["w1"]; got != desired.ProbeFailed {
				t.Fatalf("dead w1: %v, want failed", got)
			}
		}
		if n := f.count(w1.Overlay); n != 1 {
			t.Fatalf("%d probes of a node that stays dead, want 1", n)
		}
		// It came back and gossip reports it down again: probed again,
		// the failure showing meanwhile.
		f.mu.Lock()
		f.seen["w1"], f.up[w1.Overlay] = f.now, true
		f.mu.Unlock()
		e.judge([]desired.Record{w1}, f.lastSeen)
		settle(t, e)
		if got := e.judge([]desired.Record{w1}, f.lastSeen)["w1"]; got != desired.ProbeAnswered || f.count(w1.Overlay) != 2 {
			t.Fatalf("reported down anew: %v after %d probes, want answered after 2", got, f.count(w1.Overlay))
		}
	})
	t.Run("ok/failure-without-a-gossip-time-is-asked-again", func(t *testing.T) {
		f := newProbeFake() // a member shown leaving: serf raises no event, gossip has no time
		e := f.evidence()
		defer e.close()
		e.judge([]desired.Record{w1}, f.lastSeen)
		settle(t, e)
		e.judge([]desired.Record{w1}, f.lastSeen)
		f.add(evidenceFresh)
		f.mu.Lock()
		f.up[w1.Overlay] = true
		f.mu.Unlock()
		e.judge([]desired.Record{w1}, f.lastSeen)
		settle(t, e)
		if got := e.judge([]desired.Record{w1}, f.lastSeen)["w1"]; got != desired.ProbeAnswered || f.count(w1.Overlay) != 2 {
			t.Fatalf("%v after %d probes, want answered after 2", got, f.count(w1.Overlay))
		}
	})
	t.Run("ok/bounded-and-forgotten", func(t *testing.T) {
		f := newProbeFake()
		f.hold = make(chan struct{})
		e := f.evidence()
		defer e.close()
		var many []desired.Record
		for i := range 3 * evidenceParallel {
			many = append(many, rec(fmt.Sprintf("w%d", i), fmt.Sprintf("10.42.1.%d", i+1)))
		}
		start := time.Now()
		if got := e.judge(many, f.lastSeen)["w0"]; got != desired.ProbeUnknown {
			t.Fatalf("a probe that does not end: %v, want unknown", got)
		}
		if took := time.Since(start); took < evidenceSettle || took > 10*evidenceSettle {
			t.Fatalf("the look waited %s for probes that do not end, want about evidenceSettle (%s)", took, evidenceSettle)
		}
		e.judge(many, f.lastSeen)
		probed := func() int {
			n := 0
			for _, r := range many {
				n += f.count(r.Overlay)
			}
			return n
		}
		waitUntil(t, 5*time.Second, "the first probes start", func() bool { return probed() == evidenceParallel })
		e.mu.Lock()
		running := e.running
		e.mu.Unlock()
		if running != evidenceParallel || probed() != evidenceParallel {
			t.Fatalf("%d probes under way (%d started), want %d", running, probed(), evidenceParallel)
		}
		close(f.hold)
		settle(t, e)
		e.judge(many, f.lastSeen) // the next looks take the rest
		settle(t, e)
		e.judge(many, f.lastSeen)
		settle(t, e)
		if n := probed(); n != len(many) {
			t.Fatalf("%d probes after three looks, want one for each of %d", n, len(many))
		}
		f.add(evidenceKeep + time.Second)
		e.judge(nil, f.lastSeen)
		if len(e.probes) != 0 {
			t.Fatalf("%d entries kept past evidenceKeep with no doubt", len(e.probes))
		}
	})
	t.Run("ok/close-ends-the-probes", func(t *testing.T) {
		f := newProbeFake()
		f.hold = make(chan struct{})
		e := f.evidence()
		e.judge([]desired.Record{w1}, f.lastSeen)
		e.close()
		if f.stopped != 1 {
			t.Fatalf("%d probes ended by close, want 1", f.stopped)
		}
		e.judge([]desired.Record{rec("w2", "10.42.0.4")}, f.lastSeen)
		if n := f.count(netip.MustParseAddr("10.42.0.4")); n != 0 {
			t.Fatalf("a closed evidence started %d probes", n)
		}
	})
}
