package control

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// A node that left, failed its join or was removed still has the gossip
// keys it ran, so raft records a rotation owed for it
// (state.Cluster.KeysDebt). A removal rotates at once and reports the
// outcome; a leave or a failed join returns without waiting, and the
// leader pays what is owed in the background (PayKeys), on its reconcile
// pass. The debt is in raft: a new leader, or a restarted one, takes it
// up, and a stalled rotation is tried again with a backoff.

// Backoff after a rotation that did not finish (a member lagging, a
// leader change): it doubles from payKeysRetry up to payKeysRetryMax.
const (
	payKeysRetry    = 5 * time.Second
	payKeysRetryMax = 5 * time.Minute
)

// A rotation another node runs (a removal's, `keys rotate`) pays the
// debt too, and two at once would fail each other (codes.Busy). So the
// leader waits until what it sees (the keyring and the debt) has stood
// still for payKeysGrace, and while the keyring holds two keys (a
// rotation between install and drop) for payKeysStalled: only a rotation
// that stopped half way is taken over. Both are measured on this node's
// clock alone.
const (
	payKeysGrace   = 3 * time.Second
	payKeysStalled = 3*DefaultKeyStepTimeout + payKeysGrace
)

// keyDebt is this node's background rotation: at most one at a time.
type keyDebt struct {
	mu      sync.Mutex
	running bool
	wait    time.Duration // backoff after the last failure (0: none)
	next    time.Time     // no new attempt before this
	seen    string        // the keyring and debt last seen
	since   time.Time     // when seen was first seen (this node's clock)
	armed   string        // the seen a wake-up is set for
}

// PayKeys starts a gossip key rotation in the background when raft says
// one is owed, this node leads, none runs here, nothing changed for the
// grace (payKeysGrace, payKeysStalled) and the backoff has passed. It
// returns whether it started one.
func (p *Plane) PayKeys() bool {
	if !p.raft.LeaderReady() { // its FSM holds every entry before its term (raftnode/ready.go)
		return false
	}
	cl, ok := p.raft.FSM().Cluster()
	if !ok || len(cl.KeysDebt()) == 0 {
		return false
	}
	d := &p.keyDebt
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if seen := state.KeyringID(cl.GossipKeys) + fmt.Sprint(cl.KeysDebt()); seen != d.seen {
		d.seen, d.since = seen, now
	}
	grace := payKeysGrace
	if len(cl.GossipKeys) > 1 {
		grace = payKeysStalled
	}
	if d.running {
		return false
	}
	at := d.since.Add(grace)
	if d.next.After(at) {
		at = d.next
	}
	if now.Before(at) {
		if d.armed != d.seen { // look again then, not at the next reconcile tick
			d.armed = d.seen
			time.AfterFunc(at.Sub(now), p.hooks.Poke)
		}
		return false
	}
	d.running = true
	owed := len(cl.KeysDebt())
	ctx, cancel := context.WithCancel(context.Background())
	p.wg.Go(func() {
		defer cancel()
		go func() {
			select {
			case <-p.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		r, err := p.RotateKeys(ctx, p.self())
		d.mu.Lock()
		defer d.mu.Unlock()
		d.running = false
		if err != nil {
			d.wait = min(max(2*d.wait, payKeysRetry), payKeysRetryMax)
			d.next, d.armed = time.Now().Add(d.wait), ""
			p.log.Warn("gossip key rotation owed for departed nodes did not finish; trying again later",
				"code", codes.OrInternal(err), "owed", owed, "retry_in", d.wait, "err", err)
			return
		}
		d.wait, d.next = 0, time.Time{}
		p.log.Info("gossip key rotated for departed nodes", "owed", owed, "primary", r.Primary)
	})
	return true
}
