package nebula

import "sync"

// meshd patch 4 (PATCHES.md, "Say when the tunnels change"): the host map
// counts every change to its established tunnels that Control's host
// listings would show (a tunnel added, deleted or made primary; a
// tunnel's current remote; its relay list), and wakes whoever waits on
// TunnelChanges. meshd's loops that read the tunnels (relays down, path
// upgrades) then run when a tunnel changed, not four times a second over
// every peer it knows (meshd issue 54).

// tunnelChanges is a change counter with a channel closed at each change.
// A nil *tunnelChanges (a HostInfo not in the main host map yet) counts
// nothing.
type tunnelChanges struct {
	mu   sync.Mutex
	gen  uint64
	wake chan struct{}
}

// bump counts one change and wakes every waiter.
func (c *tunnelChanges) bump() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// wait returns the count of changes so far and a channel closed at the
// next change.
func (c *tunnelChanges) wait() (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	return c.gen, c.wake
}

// TunnelChanges returns how many times the established tunnels changed
// since start (added, deleted, made primary, a new current remote or
// relay list) and a channel closed at the next change (meshd patch 4).
func (c *Control) TunnelChanges() (uint64, <-chan struct{}) {
	return c.f.hostMap.changes.wait()
}
