package member

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// TestPairBook: a member counts unreachable at the K-th failed probe in a
// row and not before, one answer clears it (and a run short of K), and a
// member no longer probed is forgotten.
func TestPairBook(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lost := context.DeadlineExceeded
	tests := []struct {
		name    string
		probes  []error // of member "a", one a second
		want    []string
		changed []bool // what record reported, probe by probe
	}{
		{"ok/answers", []error{nil, nil}, nil, []bool{false, false}},
		{"ok/two-of-three", []error{lost, lost}, nil, []bool{false, false}},
		{"fail/three-in-a-row", []error{lost, lost, lost}, []string{"a"}, []bool{false, false, true}},
		{"fail/stays-down", []error{lost, lost, lost, lost}, []string{"a"}, []bool{false, false, true, false}},
		{"ok/one-answer-clears", []error{lost, lost, lost, nil}, nil, []bool{false, false, true, true}},
		{"ok/answer-restarts-the-count", []error{lost, lost, nil, lost, lost}, nil, []bool{false, false, false, false, false}},
		{"fail/no-route", []error{syscall.EHOSTUNREACH, syscall.EHOSTUNREACH, syscall.EHOSTUNREACH}, []string{"a"}, []bool{false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := pairBook{misses: 3}
			for i, err := range tt.probes {
				if got := b.record("a", err, t0.Add(time.Duration(i)*time.Second)); got != tt.changed[i] {
					t.Errorf("probe %d (%v): changed %v, want %v", i, err, got, tt.changed[i])
				}
			}
			var got []string
			for _, d := range b.down() {
				got = append(got, d.name)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("down %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("ok/run-since-first-failure", func(t *testing.T) {
		b := pairBook{misses: 2}
		b.record("a", nil, t0)
		b.record("a", syscall.EHOSTUNREACH, t0.Add(time.Second))
		b.record("a", lost, t0.Add(2*time.Second))
		d := b.down()
		if len(d) != 1 || !d[0].since.Equal(t0.Add(time.Second)) || d[0].failed != 2 || d[0].reason == "" {
			t.Fatalf("down %+v: want a since its first failed probe, 2 failed, with a reason", d)
		}
	})
	t.Run("ok/forgotten-when-not-probed", func(t *testing.T) {
		b := pairBook{misses: 1}
		b.record("a", lost, t0)
		b.record("b", lost, t0)
		b.keep(func(name string) bool { return name == "b" })
		if d := b.down(); len(d) != 1 || d[0].name != "b" {
			t.Fatalf("down %+v, want b only", d)
		}
		b.record("a", lost, t0) // probed again: a run of its own from one
		if d := b.down(); len(d) != 2 || d[0].name != "a" || d[0].failed != 1 {
			t.Fatalf("down %+v, want a anew and b", d)
		}
	})
}

// TestPairRounds: a member that stops answering shows in status (a
// PairUnreachable warning naming it, status.overlay.unreachable) after
// Misses rounds, and is gone from both after one round it answers.
func TestPairRounds(t *testing.T) {
	cfg := config.PairProbe{Every: time.Hour, Timeout: 50 * time.Millisecond, Misses: 2, Parallel: 2}
	targets := []pairTarget{}
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		targets = append(targets, pairTarget{name: name, addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, 0, byte(i + 2)}), 7946)})
	}
	var (
		mu  sync.Mutex
		cut = map[netip.Addr]bool{}
	)
	reach := func(ctx context.Context, ap netip.AddrPort) error {
		mu.Lock()
		down := cut[ap.Addr()]
		mu.Unlock()
		if !down {
			return nil
		}
		<-ctx.Done() // a dropped SYN: no answer until the probe's deadline
		return ctx.Err()
	}
	ph := newPairHealth(cfg, func() []pairTarget { return targets }, reach, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	status := func() *apitype.Status {
		s := &apitype.Status{Overlay: &apitype.Overlay{}}
		ph.fillStatus(s)
		return s
	}
	ctx := t.Context()

	ph.round(ctx)
	if s := status(); len(s.Warnings) != 0 || s.Overlay.Unreachable != nil {
		t.Fatalf("every member answers: warnings %+v, unreachable %v", s.Warnings, s.Overlay.Unreachable)
	}

	mu.Lock()
	cut[targets[1].addr.Addr()] = true // b stops answering
	mu.Unlock()
	start := time.Now()
	ph.round(ctx)
	if took := time.Since(start); took > 20*cfg.Timeout {
		t.Errorf("a round with one silent member took %s; each probe is bounded by %s", took, cfg.Timeout)
	}
	if s := status(); len(s.Warnings) != 0 {
		t.Fatalf("one failed probe of b: warnings %+v, want none before Misses (2)", s.Warnings)
	}
	ph.round(ctx)
	s := status()
	if len(s.Warnings) != 1 || s.Warnings[0].Code != codes.PairUnreachable || !strings.Contains(s.Warnings[0].Detail, "cannot reach b ") ||
		!slices.Equal(s.Overlay.Unreachable, []string{"b"}) {
		t.Fatalf("two failed probes of b: warnings %+v, unreachable %v; want %s naming b", s.Warnings, s.Overlay.Unreachable, codes.PairUnreachable)
	}
	if got := ph.unreachable(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("unreachable %v, want [b]", got)
	}

	mu.Lock()
	delete(cut, targets[1].addr.Addr())
	mu.Unlock()
	ph.round(ctx)
	if s := status(); len(s.Warnings) != 0 || s.Overlay.Unreachable != nil || ph.unreachable() != nil {
		t.Fatalf("b answers again: warnings %+v, unreachable %v", s.Warnings, s.Overlay.Unreachable)
	}
}

// TestPairRoundStopped: a round cut short by the runtime's stop counts
// nothing, and returns once its probes have.
func TestPairRoundStopped(t *testing.T) {
	cfg := config.PairProbe{Every: time.Hour, Timeout: time.Hour, Misses: 1, Parallel: 1}
	blocked := make(chan struct{}, 1)
	reach := func(ctx context.Context, _ netip.AddrPort) error {
		blocked <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	targets := []pairTarget{{name: "a", addr: netip.MustParseAddrPort("10.42.0.2:7946")}, {name: "b", addr: netip.MustParseAddrPort("10.42.0.3:7946")}}
	ph := newPairHealth(cfg, func() []pairTarget { return targets }, reach, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	stop, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { ph.round(stop); close(done) }()
	<-blocked // a's probe waits for an answer that never comes
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the round did not return within 10s of its stop")
	}
	if got := ph.unreachable(); got != nil {
		t.Fatalf("unreachable %v after a round cut short; want nothing counted (Misses is 1)", got)
	}
}

// TestPairRoundParallel: a round probes Parallel members at once, never
// more, each within Timeout: five silent members, two at a time, take
// three timeouts.
func TestPairRoundParallel(t *testing.T) {
	cfg := config.PairProbe{Every: time.Hour, Timeout: 30 * time.Millisecond, Misses: 1, Parallel: 2}
	var running, most atomic.Int32
	reach := func(ctx context.Context, _ netip.AddrPort) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-ctx.Done()
		return ctx.Err()
	}
	var targets []pairTarget
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		targets = append(targets, pairTarget{name: name, addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, 0, byte(i + 2)}), 7946)})
	}
	ph := newPairHealth(cfg, func() []pairTarget { return targets }, reach, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	start := time.Now()
	ph.round(t.Context())
	took := time.Since(start)
	if m := most.Load(); m != 2 {
		t.Errorf("%d probes at once, want Parallel (2)", m)
	}
	if took < 3*cfg.Timeout || took > 10*time.Second {
		t.Errorf("the round took %s, want three waves of %s", took, cfg.Timeout)
	}
	if got := ph.unreachable(); len(got) != 5 {
		t.Errorf("unreachable %v, want all five (Misses 1)", got)
	}
}

// TestPairPick: a round probes at most PerRound members (issue 54: it
// probed every member, a tunnel to each): those with failed probes
// first, every round, then the next ones in name order, wrapping, so
// every member is probed within N/PerRound rounds. The targets come
// sorted by name (pairTargets sorts them once per change, not the round).
func TestPairPick(t *testing.T) {
	var all []pairTarget
	for i := range 40 {
		all = append(all, pairTarget{name: fmt.Sprintf("w%02d", 39-i), addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, 1, byte(i)}), 7946)})
	}
	sortTargets(all)
	ph := newPairHealth(config.PairProbe{PerRound: 16, Misses: 3}, nil, nil, slog.New(slog.DiscardHandler), time.Now)
	names := func(ts []pairTarget) []string {
		var out []string
		for _, tg := range ts {
			out = append(out, tg.name)
		}
		return out
	}
	want := func(from, to int, also ...string) []string {
		out := slices.Clone(also)
		for i := from; i != to; i = (i + 1) % 40 {
			if name := fmt.Sprintf("w%02d", i); !slices.Contains(also, name) {
				out = append(out, name)
			}
		}
		return out
	}
	seen := map[string]int{}
	for round, w := range [][]string{want(0, 16), want(16, 32), want(32, 8)} {
		got := names(ph.pick(all))
		if !slices.Equal(got, w) {
			t.Fatalf("round %d: %v, want %v", round+1, got, w)
		}
		for _, n := range got {
			seen[n]++
		}
	}
	if len(seen) != 40 {
		t.Fatalf("3 rounds of 16 probed %d of 40 members, want all", len(seen))
	}
	ph.book.record("w20", errors.New("i/o timeout"), time.Now()) // one failed probe: probed every round until it answers
	if got, w := names(ph.pick(all)), want(8, 24, "w20")[:16]; !slices.Equal(got, w) {
		t.Fatalf("with w20 failing: %v, want %v", got, w)
	}
	if got := ph.pick(all[:10]); len(got) != 10 {
		t.Fatalf("10 members: %d probed, want all", len(got))
	}
}
