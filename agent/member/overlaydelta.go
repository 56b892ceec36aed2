package member

import (
	"net/netip"
	"reflect"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// A membership change reaches Nebula as the change itself (issue 54 item
// 2): the overlay loop keeps a desired.Tracker in step with the inputs of
// the config applied, and a pass whose inputs differ from the last in
// records, gone ids or blocklist only hands Mesh.Apply what that changed,
// at the cost of the change (plus one comparison per record), instead of
// Compute over every record, a comparison of the whole config and
// Mesh.Reload. Everything else takes the whole-config path
// (reconcileOverlay), which then starts the tracker afresh (track): the
// first pass after a start, a new identity, firewall or MTU, a change of
// routes or of this node's own inputs (name, addresses, NAT), a cut-off
// node, a refused change, two records with one name or address.

// track starts the tracker from the inputs of the config just applied
// (or found applied); a cut-off node's config is not theirs, so it is
// not tracked.
func (ov *overlay) track(in desired.Inputs, cut bool) {
	ov.tracking = !cut && ov.tracker.Reset(in)
}

// applyMemberChange is reconcileOverlay's path for a membership change: true
// when it handled the pass (applied the change, found none, or reported
// a refusal; a refusal leaves the next pass to the whole-config path,
// which tries again), false when the whole-config path must run now.
func (ov *overlay) applyMemberChange(in desired.Inputs) bool {
	return ov.applyTracked(in, func() (mesh.Change, bool) { return ov.tracker.Update(in) })
}

// applyTracked is applyMemberChange with the tracker's update given:
// Update over every record, or UpdateChanged over those that changed
// (overlaypass.go).
func (ov *overlay) applyTracked(in desired.Inputs, update func() (mesh.Change, bool)) bool {
	if !ov.tracking || ov.removed() {
		return false
	}
	applied := ov.applied()
	rest := ov.restConfig()
	if !sameRest(rest, applied) {
		ov.tracking = false
		return false
	}
	ch, ok := update()
	if !ok {
		ov.tracking = false
		return false
	}
	r := ov.tracker.Routes(in)
	soMark := 0
	if r.ExitChosen && !rest.Userspace {
		soMark = exitMark
	}
	if !slices.Equal(r.Unsafe, applied.UnsafeRoutes) || soMark != applied.SoMark {
		ov.tracking = false // routes are the whole config's (Reload)
		return false
	}
	if soMark == 0 {
		r = desired.Routed{Unsafe: r.Unsafe} // what applyRouting hands the kernel then
	}
	if desired.Empty(ch) {
		if !slices.Equal(applied.Blocklist, in.Blocklist) { // the same fingerprints in another order
			ov.setApplied(ch, in.Blocklist)
		}
		ov.applyRoutes(in, r)
		return true
	}
	start := time.Now()
	err := ov.mesh.Apply(ch)
	ov.lastReload, ov.gap = start, nextGap(time.Since(start))
	if err != nil {
		ov.tracking = false
		ov.overlayErr.Store(errBox{err})
		ov.log.Warn("overlay change refused; the running overlay is unchanged", "code", codes.OrInternal(err), "err", err)
		return true
	}
	ov.overlayErr.Store(errBox{})
	ov.setApplied(ch, in.Blocklist)
	ov.pathWake.ring() // the relay list may have changed (pathwake.go)
	ov.applyRoutes(in, r)
	ov.log.Debug("overlay changed", "static_hosts", len(ch.StaticHosts), "lighthouses", ch.Lighthouses != nil,
		"relays", ch.Relays != nil, "blocked", len(ch.Block), "unblocked", len(ch.Unblock), "took", time.Since(start))
	return true
}

// sameRest reports whether the config c would be, its membership fields
// aside, the one applied: c is restConfig's, which has none.
func sameRest(c, applied mesh.Config) bool {
	applied.Lighthouses, applied.StaticHosts, applied.Blocklist, applied.Relays, applied.Roaming = nil, nil, nil, nil, nil
	applied.UnsafeRoutes, applied.SoMark = nil, 0
	return reflect.DeepEqual(c, applied)
}

// setApplied records ch as applied: the static host map in place (under
// appliedMu: staticPeerCount reads it there), the lists replaced as
// Compute lists them (nil when empty), the blocklist as the inputs give
// it. A whole-config pass then compares equal to what a change built.
func (ov *overlay) setApplied(ch mesh.Change, blocklist []string) {
	ov.appliedMu.Lock()
	defer ov.appliedMu.Unlock()
	c := &ov.meshApplied
	if c.StaticHosts == nil && len(ch.StaticHosts) > 0 {
		c.StaticHosts = map[netip.Addr][]netip.AddrPort{}
	}
	for ip, a := range ch.StaticHosts {
		if a == nil {
			delete(c.StaticHosts, ip)
		} else {
			c.StaticHosts[ip] = a
		}
	}
	if ch.Lighthouses != nil {
		c.Lighthouses = listOrNil(ch.Lighthouses)
	}
	if ch.Relays != nil {
		c.Relays = listOrNil(ch.Relays)
	}
	if ch.Roaming != nil {
		c.Roaming = listOrNil(ch.Roaming)
	}
	c.Blocklist = slices.Clone(blocklist)
}

// listOrNil is l, or nil when empty (as Compute lists none).
func listOrNil[T any](l []T) []T {
	if len(l) == 0 {
		return nil
	}
	return l
}
