package nebula

import (
	"maps"
	"net/netip"
	"sync"
)

// meshd patch 5 (PATCHES.md, "Apply a membership change without a
// reload"): the lighthouse's set of static_host_map addresses. Upstream
// keeps an immutable map behind an atomic pointer, and a reload stores a
// new one; changing one entry would copy all of them (at 10,000 members,
// 660 KB per membership change). Here a reload still stores a new map
// (Store), and ApplyConfigDelta changes the stored one in place (change),
// under a lock that readers take (has).

type staticHosts struct {
	mu sync.RWMutex
	m  *map[netip.Addr]struct{}
}

// Load returns the map stored. Only a reload, under the config's reload
// lock, reads it whole: ApplyConfigDelta, the one writer in place, holds
// the same lock.
func (s *staticHosts) Load() *map[netip.Addr]struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m
}

// Store replaces the map.
func (s *staticHosts) Store(m *map[netip.Addr]struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = m
}

func (s *staticHosts) has(vpnAddr netip.Addr) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := (*s.m)[vpnAddr]
	return ok
}

func (s *staticHosts) clone() map[netip.Addr]struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(*s.m)
}

// change adds add to the stored map and takes remove out of it.
func (s *staticHosts) change(add map[netip.Addr]struct{}, remove []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.Copy(*s.m, add)
	for _, a := range remove {
		delete(*s.m, a)
	}
}
