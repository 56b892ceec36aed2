package control

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// readBatch lets the concurrent reads of a follower share read index
// round trips to the leader (group commit, for reads). A read joins the
// round that has not started yet, or opens the next one; one round is in
// flight at a time. Every read a round serves arrived before the round
// started, so the index it brings back is at least the leader's commit
// index at that read's arrival: each read stays linearizable.
//
// Why: in a burst of 50 joins every worker's strict reads (node list,
// revocations, gossip keys) and confirmation landed on the same follower
// (the first seed of every token), and each was its own call to the
// leader's /v1/raft/index, queued behind the others on the at most 16
// connections one control node opens to another. Fetching the node
// list, the longest wait of a join's confirmation, took 1.1-1.4 s at the
// median with `timers: lan` (docs/performance.md, issue 25).
type readBatch struct {
	mu   sync.Mutex
	last *readRound // the latest round, started or waiting for its turn
}

// readRound is one round trip for the index.
type readRound struct {
	started bool // guarded by readBatch.mu
	reads   int  // how many reads it serves, guarded by readBatch.mu
	done    chan struct{}
	index   uint64 // set before done is closed
	err     error
}

// index returns a leader index taken after this call began. The round
// runs fetch on a goroutine counted in wg, bounded by bound (the reads it
// serves may have other deadlines than the one that opened it). When ctx
// ends first, the error wraps ErrUnreachable, as a call to the leader cut
// short does, so callers retry or answer NoLeader as before.
func (b *readBatch) index(ctx context.Context, wg *sync.WaitGroup, bound time.Duration,
	fetch func(context.Context) (uint64, error)) (uint64, error) {
	b.mu.Lock()
	r := b.last
	if r == nil || r.started {
		prev := r
		r = &readRound{done: make(chan struct{})}
		b.last = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			if prev != nil {
				<-prev.done // bounded: every round ends within bound
			}
			b.mu.Lock()
			r.started = true
			b.mu.Unlock()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
			r.index, r.err = fetch(rctx)
			cancel()
			close(r.done)
		}()
	}
	r.reads++
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.index, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: waiting for a read index from the leader: %v", ErrUnreachable, context.Cause(ctx))
	}
}
