package gossip

import "sync"

// changes wakes the loops that read members' statuses or tags (relays
// down, path upgrades) when one may have changed: a member event from
// serf (a join, leave, failure, reap or tag update) or a member this
// node's probes newly suspect. They wait on Changes instead of copying
// every member on a timer (issue 54).
type changes struct {
	mu   sync.Mutex
	wake chan struct{}
}

// ring wakes every waiter; the next wait gets a new channel.
func (c *changes) ring() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// wait is a channel closed at the next ring.
func (c *changes) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	return c.wake
}

// Changes is a channel closed at the next member event or new suspicion
// (Suspects). Take it before reading Statuses or Members: a change while
// reading then still wakes the reader.
func (g *Gossip) Changes() <-chan struct{} { return g.sink.changes.wait() }
