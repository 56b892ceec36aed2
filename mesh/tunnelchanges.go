package mesh

import "sync"

// TunnelChanges says how many times this instance's established tunnels
// changed since it started (a tunnel added, deleted or made primary, a new
// current remote, a changed relay list: what Tunnels, TunnelTo and
// RelayedPeers show) and returns a channel closed at the next change
// (meshd's Nebula patch 4, third_party/nebula/PATCHES.md). A loop that
// reads the tunnels waits on it instead of listing every known peer on a
// timer (issue 54). A stopped instance returns a channel that never
// closes.
func (m *Mesh) TunnelChanges() (uint64, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return 0, nil
	}
	return m.ctrl.TunnelChanges()
}

// tunnelCache is Tunnels' last answer and the change count it was made
// at; forget drops it when the known peers change (a reload).
type tunnelCache struct {
	mu      sync.Mutex
	ok      bool
	gen     uint64
	tunnels []Tunnel
	relayed []Tunnel // those of tunnels that go through a relay
	// looks counts the calls (lists) and the lookups of every known peer
	// made to answer them (scans): what a loop that listed the tunnels on
	// a timer would drive up (TunnelLooks).
	looks TunnelLooks
}

// TunnelLooks counts Tunnels' and RelayedTunnels' work since start:
// Lists are the calls (each copies the cached list), Scans the times
// the list was made again by looking up every known peer (after a
// tunnel change or a reload). An idle node makes neither (issue 54;
// member.TestIdleLoopsDoNotScan counts them at 10,000 peers).
type TunnelLooks struct {
	Lists, Scans uint64
}

// TunnelLooks is what Tunnels and RelayedTunnels did so far.
func (m *Mesh) TunnelLooks() TunnelLooks {
	m.cache.mu.Lock()
	defer m.cache.mu.Unlock()
	return m.cache.looks
}

func (c *tunnelCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ok, c.tunnels, c.relayed = false, nil, nil
}
