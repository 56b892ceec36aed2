package mesh

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
)

// Change is a membership change, for Apply: what changed in the fields of
// Config that membership changes touch, and nothing else.
type Change struct {
	// StaticHosts sets entries of Config.StaticHosts: an overlay address
	// to its underlay addresses, or nil to remove the entry.
	StaticHosts map[netip.Addr][]netip.AddrPort
	// Lighthouses, Relays and Roaming, when not nil, replace the lists
	// (an empty, non-nil list empties one).
	Lighthouses []Lighthouse
	Relays      []netip.Addr
	Roaming     []netip.Addr
	// Block adds fingerprints to Config.Blocklist; Unblock takes them out.
	Block, Unblock []string
}

// Apply applies ch to the running instance as Reload applies a config
// that differs from the applied one by ch (a delta through Nebula patch
// 5, read back, undone on a mismatch: codes.OverlayApply), at a cost
// proportional to ch: Reload compares every static host of the config it
// is handed, Apply reads only ch's. Its entries are checked as Validate
// checks them (codes.ConfigInvalid), before anything changes.
func (m *Mesh) Apply(ch Change) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return codes.Wrap(codes.OverlayApply, errors.New("apply overlay change: the overlay is stopped"))
	}
	next, d, err := m.changed(ch)
	if err != nil {
		return codes.Wrap(codes.ConfigInvalid, err)
	}
	if d.empty() {
		return nil
	}
	id := m.id
	if !time.Now().Before(id.until) || slices.Contains(d.block, id.fingerprint) {
		if id, err = inspect(next, time.Now()); err != nil {
			return codes.Wrap(codes.OverlayApply, fmt.Errorf("apply overlay change: %w", err))
		}
	}
	return m.applyDelta(next, d, id)
}

// changed is the applied config with ch applied to its lists (not its
// static hosts: the delta carries them), and the delta, after checking
// ch's entries. The caller holds m.mu.
func (m *Mesh) changed(ch Change) (Config, delta, error) {
	old := m.applied
	next := old
	next.StaticHosts = nil // applyDelta reads the delta's, never these
	var d delta
	for ip, addrs := range ch.StaticHosts {
		if ip == m.self {
			continue
		}
		was, ok := old.StaticHosts[ip]
		switch {
		case addrs == nil && !ok:
		case addrs == nil:
			d.setHost(ip, nil)
		case !ok || !slices.Equal(was, addrs):
			if err := checkStaticHost(ip, addrs); err != nil {
				return Config{}, delta{}, err
			}
			d.setHost(ip, addrs)
		}
	}
	if ch.Lighthouses != nil {
		seen := map[netip.Addr]bool{}
		for i, lh := range ch.Lighthouses {
			if !lh.OverlayIP.IsValid() || seen[lh.OverlayIP] {
				return Config{}, delta{}, &ConfigError{Field: fmt.Sprintf("Lighthouses[%d].OverlayIP", i), Err: errors.New("missing or listed twice")}
			}
			seen[lh.OverlayIP] = true
			if err := checkUnderlay(lh.Underlay); err != nil {
				return Config{}, delta{}, &ConfigError{Field: fmt.Sprintf("Lighthouses[%d].Underlay", i), Err: err}
			}
		}
		next.Lighthouses = lighthousesWithout(ch.Lighthouses, m.self)
	}
	if ch.Relays != nil {
		for i, r := range ch.Relays {
			if !r.IsValid() {
				return Config{}, delta{}, &ConfigError{Field: fmt.Sprintf("Relays[%d]", i), Err: errors.New("invalid overlay address")}
			}
		}
		next.Relays = slices.DeleteFunc(slices.Clone(ch.Relays), func(r netip.Addr) bool { return r == m.self })
	}
	if ch.Roaming != nil {
		next.Roaming = ch.Roaming
	}
	d.complete(old, next, m.self)
	for i, fp := range ch.Block {
		if err := checkFingerprint(i, fp); err != nil {
			return Config{}, delta{}, err
		}
		if !slices.Contains(old.Blocklist, fp) && !slices.Contains(d.block, fp) {
			d.block = append(d.block, fp)
		}
	}
	for _, fp := range ch.Unblock {
		if slices.Contains(old.Blocklist, fp) && !slices.Contains(d.unblock, fp) {
			d.unblock = append(d.unblock, fp)
		}
	}
	if len(d.block) > 0 || len(d.unblock) > 0 {
		next.Blocklist = append(slices.DeleteFunc(slices.Clone(old.Blocklist), func(fp string) bool {
			return slices.Contains(d.unblock, fp)
		}), d.block...)
	}
	return next, d, nil
}
