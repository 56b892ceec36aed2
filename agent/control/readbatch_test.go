package control

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeLeader answers read index rounds one by one, when the test says:
// round k (from 1) answers index 100*k.
type fakeLeader struct {
	mu      sync.Mutex
	rounds  int
	started chan int      // round k started
	release chan struct{} // let the started round answer
}

func newFakeLeader() *fakeLeader {
	return &fakeLeader{started: make(chan int, 16), release: make(chan struct{})}
}

func (f *fakeLeader) fetch(ctx context.Context) (uint64, error) {
	f.mu.Lock()
	f.rounds++
	k := f.rounds
	f.mu.Unlock()
	f.started <- k
	select {
	case <-f.release:
		return uint64(100 * k), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (f *fakeLeader) awaitRound(t *testing.T, want int) {
	t.Helper()
	select {
	case k := <-f.started:
		if k != want {
			t.Fatalf("round %d started, want %d", k, want)
		}
	case <-t.Context().Done():
		t.Fatalf("round %d never started", want)
	}
}

// TestReadBatchShares: reads that arrive while a round is in flight share
// the next round (one call to the leader for all of them), and none of
// them gets the answer of the round that was already in flight when it
// arrived: that index may predate it.
func TestReadBatchShares(t *testing.T) {
	var b readBatch
	var wg sync.WaitGroup
	defer wg.Wait()
	f := newFakeLeader()
	ctx := t.Context()

	first := make(chan uint64, 1)
	go func() {
		idx, err := b.index(ctx, &wg, time.Minute, f.fetch)
		if err != nil {
			t.Error(err)
		}
		first <- idx
	}()
	f.awaitRound(t, 1) // in flight

	const n = 20
	var later sync.WaitGroup
	got := make(chan uint64, n)
	for range n {
		later.Add(1)
		go func() {
			defer later.Done()
			idx, err := b.index(ctx, &wg, time.Minute, f.fetch)
			if err != nil {
				t.Error(err)
			}
			got <- idx
		}()
	}
	waitFor(t, 10*time.Second, "20 reads wait on round 2", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.last != nil && !b.last.started && b.last.reads == n
	})
	if len(got) != 0 {
		t.Fatal("a later read was answered by the round in flight when it arrived")
	}
	f.release <- struct{}{} // round 1 answers
	if idx := <-first; idx != 100 {
		t.Fatalf("first read got %d, want 100", idx)
	}
	f.awaitRound(t, 2)
	close(f.release) // round 2 (and any later) answers
	later.Wait()
	close(got)
	for idx := range got {
		if idx != 200 {
			t.Fatalf("a later read got %d, want 200 (the round that started after it arrived)", idx)
		}
	}
	if f.rounds != 2 {
		t.Fatalf("%d calls to the leader for 21 reads, want 2", f.rounds)
	}
}

// TestReadBatchGivesUp: a read whose context ends waiting is answered
// with an error that callers treat as an unreachable leader (retried, or
// NoLeader), and the round still ends, for the reads that wait on.
func TestReadBatchGivesUp(t *testing.T) {
	var b readBatch
	var wg sync.WaitGroup
	f := newFakeLeader()
	short, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := b.index(short, &wg, time.Minute, f.fetch)
		errc <- err
	}()
	f.awaitRound(t, 1)
	cancel()
	if err := <-errc; !errors.Is(err, ErrUnreachable) || !retryable(err) {
		t.Fatalf("a read cut short: %v, want a retryable ErrUnreachable", err)
	}
	other := make(chan uint64, 1)
	go func() {
		idx, _ := b.index(t.Context(), &wg, time.Minute, f.fetch)
		other <- idx
	}()
	f.release <- struct{}{} // round 1 ends although its opener left
	f.awaitRound(t, 2)
	f.release <- struct{}{}
	if idx := <-other; idx != 200 {
		t.Fatalf("the next read got %d, want 200", idx)
	}
	wg.Wait()
}

// TestReadBatchBound: a round that the leader does not answer ends at its
// bound with the leader's error, whatever the deadlines of the reads.
func TestReadBatchBound(t *testing.T) {
	var b readBatch
	var wg sync.WaitGroup
	defer wg.Wait()
	f := newFakeLeader()
	errc := make(chan error, 1)
	go func() {
		_, err := b.index(t.Context(), &wg, 50*time.Millisecond, f.fetch)
		errc <- err
	}()
	f.awaitRound(t, 1)
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an unanswered round: %v, want its bound's deadline", err)
	}
}

// TestReadBatchOverlap: a round stuck in flight holds the next reads up
// for overlap, not for its whole bound: the next round starts anyway and
// answers them.
func TestReadBatchOverlap(t *testing.T) {
	b := readBatch{overlap: 20 * time.Millisecond}
	var wg sync.WaitGroup
	defer wg.Wait()
	f := newFakeLeader()
	defer close(f.release) // let the stuck round end (before wg.Wait)
	go func() { _, _ = b.index(t.Context(), &wg, time.Minute, f.fetch) }()
	f.awaitRound(t, 1) // never released: stuck until the end of the test
	got := make(chan uint64, 1)
	go func() {
		idx, err := b.index(t.Context(), &wg, time.Minute, func(ctx context.Context) (uint64, error) {
			f.mu.Lock()
			f.rounds++
			f.mu.Unlock()
			return 200, nil
		})
		if err != nil {
			t.Error(err)
		}
		got <- idx
	}()
	select {
	case idx := <-got:
		if idx != 200 {
			t.Fatalf("the read behind a stuck round got %d, want 200", idx)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read waited out a stuck round")
	}
}
