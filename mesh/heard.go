package mesh

import (
	"net/netip"
	"time"
)

// HostHeard is when this lighthouse last took a host update from a
// member's overlay address (Nebula patch 9, third_party/nebula/PATCHES.md).
type HostHeard struct {
	Addr netip.Addr
	At   time.Time
}

// LighthouseInterval is how often a member sends each lighthouse a host
// update with config c (Nebula's lighthouse.interval, as Render sets it):
// 2 s at `timers: lan` (Nebula's own default is 10 s), so the control
// nodes' liveness verdict, three intervals of silence, stays within
// gossip's bound (docs/architecture.md, "Gossip at 1,000 and 10,000
// members", step 2 (i)); 1 s with Fast.
func LighthouseInterval(c Config) time.Duration {
	if c.Fast {
		return time.Second
	}
	return 2 * time.Second
}

// Heard says when this instance, as a lighthouse, last took a host update
// from addr; false when it never did, is no lighthouse or is stopped.
// Every member sends each lighthouse one every lighthouse.interval (2 s,
// 1 s with Fast), so a member long unheard has stopped or lost its way to
// this node.
func (m *Mesh) Heard(addr netip.Addr) (time.Time, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return time.Time{}, false
	}
	return m.ctrl.LighthouseHeard(addr)
}

// Silent returns up to n members, longest silent first, whose last host
// update reached this lighthouse before cutoff, and how many members it
// has heard from in all. It costs what it returns, not what is known: a
// loop may call it on a timer (issue 54).
func (m *Mesh) Silent(cutoff time.Time, n int) (silent []HostHeard, heard int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return nil, 0
	}
	got, heard := m.ctrl.LighthouseSilent(cutoff, n)
	silent = make([]HostHeard, len(got))
	for i, h := range got {
		silent[i] = HostHeard{Addr: h.VpnAddr, At: h.At}
	}
	return silent, heard
}

// ForgetHeard drops addr from the record of members heard: a member that
// left the cluster is gone, not silent.
func (m *Mesh) ForgetHeard(addr netip.Addr) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.stopped {
		m.ctrl.LighthouseForget(addr)
	}
}
