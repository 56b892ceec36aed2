package member

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/gossip"
)

// countingFacts are cluster facts that hold a fixed revocation list and
// count the refreshes asked of them (each a fetch from, or a read index
// on, the control nodes).
type countingFacts struct {
	clusterFacts // nil: only the methods below are called
	refreshes    atomic.Int64
	revoked      control.Revocations
}

func (f *countingFacts) Refresh(context.Context, bool) (bool, error) {
	f.refreshes.Add(1)
	return false, nil
}

func (f *countingFacts) Revocations() control.Revocations { return f.revoked }

func queryMembership(f clusterFacts) *membership {
	nd := &node{cluster: f, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		kick: make(chan struct{}, 1), followKick: make(chan struct{}, 1)}
	return &membership{node: nd, ov: &overlay{node: nd}, keys: &keyring{node: nd}}
}

// TestForgedRevocationQueries is issue 27's first attack: any holder of
// the gossip key sent 20 revocation queries for version 1,000,000,000
// with a 40 s deadline, and every member answered each on its own
// goroutine, re-fetching the revocation list every 10 ms until the
// sender's deadline (control nodes' CPU went to 1.45 of 2 cores). Now a
// version far beyond what the node holds is refused at once, without a
// fetch, and the queries in flight are few.
func TestForgedRevocationQueries(t *testing.T) {
	f := &countingFacts{revoked: control.Revocations{Fingerprints: []string{"a", "b", "c"}}}
	ms := queryMembership(f)
	payload, _ := json.Marshal(control.RevocationQuery{Version: 1_000_000_000})
	var wg sync.WaitGroup
	var answered atomic.Int64
	start := time.Now()
	for range 20 {
		q := gossip.NewQuery(control.RevocationQueryName, payload, time.Now().Add(40*time.Second), func([]byte) error {
			answered.Add(1)
			return nil
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms.answerRevocation(t.Context(), q)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Errorf("20 forged queries still answered after 1 s (%d refreshes so far); want each refused at once", f.refreshes.Load())
	}
	if n := f.refreshes.Load(); n > 0 {
		t.Errorf("%d refreshes for 20 queries of a version 1e9 beyond the list's 3; want none", n)
	}
	if answered.Load() != 0 {
		t.Errorf("%d forged queries acknowledged", answered.Load())
	}
	t.Logf("20 forged queries: returned after %s, %d refreshes", time.Since(start).Round(time.Millisecond), f.refreshes.Load())
}

// TestQueryGate: a query's deadline is cut to the longest meshd gives its
// kind, at most queryConcurrency of a kind are answered at once (one past
// is dropped until one ends), and unknown names are not answered.
func TestQueryGate(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	release := make(chan struct{})
	deadlines := make(chan time.Time, 16)
	g := &queryGate{now: func() time.Time { return now }, kinds: map[string]*queryKind{
		"q": {longest: 30 * time.Second, slots: make(chan struct{}, queryConcurrency),
			answer: func(_ context.Context, q gossip.Query) { deadlines <- q.Deadline; <-release }},
	}}
	var wg sync.WaitGroup
	ask := func(name string, deadline time.Duration) bool {
		return g.dispatch(t.Context(), &wg, gossip.NewQuery(name, nil, now.Add(deadline), nil))
	}
	if ask("other", time.Second) {
		t.Fatal("an unknown query name was dispatched")
	}
	for i := range queryConcurrency {
		if !ask("q", 40*time.Second) {
			t.Fatalf("query %d of %d refused", i+1, queryConcurrency)
		}
	}
	if ask("q", time.Second) {
		t.Fatalf("query %d dispatched beyond the limit of %d", queryConcurrency+1, queryConcurrency)
	}
	for range queryConcurrency {
		if d := <-deadlines; !d.Equal(now.Add(30 * time.Second)) {
			t.Errorf("deadline %s, want the asker's 40 s cut to 30 s", d.Sub(now))
		}
	}
	release <- struct{}{} // one answer ends: its slot is free again
	deadline := time.After(5 * time.Second)
	for !ask("q", 10*time.Second) {
		select {
		case <-deadline:
			t.Fatal("no slot free 5 s after an answer ended")
		case <-time.After(time.Millisecond):
		}
	}
	if d := <-deadlines; !d.Equal(now.Add(10 * time.Second)) {
		t.Errorf("deadline %s, want the asker's 10 s kept", d.Sub(now))
	}
	close(release)
	wg.Wait()
}

// TestAnswerRevocationFetchesOnce: a version the node's list has not
// reached yet is fetched for at once, and then at most once a second
// while it stays behind (not every 10 ms, as before issue 27); a version
// within the list needs no fetch at all.
func TestAnswerRevocationFetchesOnce(t *testing.T) {
	f := &countingFacts{revoked: control.Revocations{Fingerprints: []string{"a", "b", "c"}}}
	ms := queryMembership(f)
	ask := func(version int, deadline time.Duration) {
		payload, _ := json.Marshal(control.RevocationQuery{Version: version})
		ms.answerRevocation(t.Context(), gossip.NewQuery(control.RevocationQueryName, payload, time.Now().Add(deadline),
			func([]byte) error { return nil }))
	}
	ask(5, 1500*time.Millisecond) // two ahead, never reached
	if n := f.refreshes.Load(); n < 1 || n > 2 {
		t.Errorf("%d refreshes in 1.5 s for a version two ahead; want 1 or 2", n)
	}
	f.refreshes.Store(0)
	ask(2, 200*time.Millisecond) // held already; blocksAll is false (nothing applied), so it waits silently
	if n := f.refreshes.Load(); n != 0 {
		t.Errorf("%d refreshes for a version the list holds; want none", n)
	}
}
