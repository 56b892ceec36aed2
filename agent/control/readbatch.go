package control

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"
)

// readBatch lets the concurrent reads of a follower share read index
// round trips to the leader (group commit, for reads). A read joins the
// round that has not started yet, or opens the next one; a round starts
// when the one in flight ends, or has been out for overlap. Every read a
// round serves arrived before the round started, so the index it brings
// back is at least the leader's commit index at that read's arrival: each
// read stays linearizable.
//
// Why: in a burst of 50 joins every worker's strict reads (node list,
// revocations, gossip keys), confirmation and admission reads landed on
// the same follower, each its own call to the leader's /v1/raft/index
// beside the forwarded writes and signing, on the at most 16 connections
// one control node opens to another; under load such calls timed out
// ("no leader confirmed a read index within 5s") and failed an admission
// or a confirmation. Shared, about 340 reads on the follower took 52
// calls (issue 25, docs/performance.md).
type readBatch struct {
	mu   sync.Mutex
	last *readRound // the latest round, started or waiting for its turn
	// overlap is how long a round may be in flight before the next one
	// starts anyway (zero: readOverlap), so that one call stuck on a bad
	// connection holds the follower's reads up that long, not for its
	// whole bound.
	overlap time.Duration
}

// readOverlap is readBatch's default overlap. The leader answers a read
// index in about a millisecond (1.1 ms at the median, 0.3 s at most in a
// 50-join burst); a round still out after this is likely stuck.
const readOverlap = 250 * time.Millisecond

// readRound is one round trip for the index.
type readRound struct {
	started   bool      // guarded by readBatch.mu
	startedAt time.Time // guarded by readBatch.mu
	reads     int       // how many reads it serves, guarded by readBatch.mu
	done      chan struct{}
	index     uint64 // set before done is closed
	err       error
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
		// Wait for the round in flight to end, or to have been out for
		// overlap, before starting.
		var turn <-chan time.Time
		var prevDone chan struct{}
		if r != nil {
			prevDone = r.done
			turn = time.After(time.Until(r.startedAt.Add(cmp.Or(b.overlap, readOverlap))))
		}
		r = &readRound{done: make(chan struct{})}
		b.last = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			if prevDone != nil {
				select {
				case <-prevDone:
				case <-turn:
				}
			}
			b.mu.Lock()
			r.started, r.startedAt = true, time.Now()
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
