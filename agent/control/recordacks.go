package control

import (
	"context"
	"time"

	"github.com/meshd/meshd/agent/state"
)

// A removal's acknowledgement round (confirmRevocation) asks the members
// gossip lists over gossip; a worker out of the pool, which gossip does
// not list, acknowledges by its record instead: its facts report
// (poolfacts.go) moves RevokedApplied to the revocation list version its
// Nebula blocks all of, as the gossip answer says it, and the round reads
// the records. A worker that reported the version before the round began
// counts at once.

// recordAckPoll is how often the round reads the records of the workers
// it still waits for: a facts report reaches raft in a factWindow (200
// ms) after the member's jitter (up to 2 s), so a round of 5 s reads each
// at most 100 times, and only while it waits for it.
const recordAckPoll = 50 * time.Millisecond

// byRecord are the nodes of expect not in pool (those a removal asks over
// gossip): the ones whose acknowledgement it reads from their records.
func byRecord(expect map[string]state.Node, pool map[string]bool) map[string]state.Node {
	out := map[string]state.Node{}
	for name, n := range expect {
		if !pool[name] {
			out[name] = n
		}
	}
	return out
}

// watchRecordAcks reads the records of wait (by name) until each holds
// RevokedApplied >= version or bound passes, calling ack with the name of
// each that does, once; the channel closes when it is done. Cost: one
// record read per node still waited for per recordAckPoll, for at most
// bound (MaxRevocationAckTimeout).
func (p *Plane) watchRecordAcks(ctx context.Context, wait map[string]state.Node, version int, bound time.Duration, ack func(name string)) <-chan struct{} {
	done := make(chan struct{})
	if len(wait) == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		tick := time.NewTicker(recordAckPoll)
		defer tick.Stop()
		for {
			for name, n := range wait {
				if cur, ok := p.raft.FSM().Node(n.ID); ok && cur.RevokedApplied >= version {
					ack(name)
					delete(wait, name)
				}
			}
			if len(wait) == 0 {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return done
}
