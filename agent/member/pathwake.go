package member

import (
	"context"
	"sync"
)

// The loops that act on this node's tunnels (relaydown.go, pathup.go)
// read the tunnels, the members' statuses and tags, the relay list
// applied and this node's NAT. They used to look four times a second
// whatever happened, which at 50 nodes was a fifth of an idle worker's
// CPU (issue 54); they now look when one of those changed, and at the
// deadlines of their own schedules. pathWake is rung by runPathWake on a
// tunnel change (Nebula patch 4, mesh.TunnelChanges) or a gossip change
// (a member event or a new suspicion, gossip.Changes), by the overlay
// loop when it applied a new config, and by the NAT check when this
// node's NAT changed.

// bell wakes whoever waits on it; each ring closes the channel that
// wait handed out, and the next wait gets a new one. The zero bell is
// ready to use.
type bell struct {
	mu   sync.Mutex
	wake chan struct{}
}

// ring wakes every waiter.
func (b *bell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// wait is a channel closed at the next ring. Take it before reading what
// the ring is about: a change while reading then still wakes the reader.
func (b *bell) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return b.wake
}

// runPathWake rings pathWake at each tunnel or gossip change until ctx
// ends. It takes the next channels before ringing, so a change that
// comes while the woken loops read is not lost.
func (rt *Runtime) runPathWake(ctx context.Context) {
	arm := func() (<-chan struct{}, <-chan struct{}) {
		_, tunnels := rt.mesh.TunnelChanges()
		var members <-chan struct{} // nil: never (no gossip)
		if src := rt.peers(); src != nil {
			members = src.Changes()
		}
		return tunnels, members
	}
	tunnels, members := arm()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tunnels:
		case <-members:
		}
		tunnels, members = arm()
		rt.pathWake.ring()
	}
}
