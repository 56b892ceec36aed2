package member

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
)

// A relayed tunnel whose first relay gossip shows suspect or gone is
// built again at once, through the relays that are left. Nebula sends
// through the first relay of the tunnel's list it still has a tunnel to,
// and keeps the tunnel to a killed relay until its connection manager
// finds it dead: 2 s + 2 s under fast timers, 5 s + 10 s with the
// defaults. Gossip's failure (5.7-6.7 s with lan timers) is too late for
// issue 29's 5 s; its suspicion comes within one or two probe rounds
// (1-2 s with lan timers). A false suspicion costs the pair one handshake
// through the relays (milliseconds), at most once every relayDownAgain.
// With lan timers a tunnel older than Nebula's first connection test
// (5 s) used not to move within 5 s of its relay's death in 4 of 5 runs
// (e2e.TestNATSymmetricRelayed/lan, with the relay killed once the
// tunnel is 10 s old). A tunnel
// built before the node's overlay listed every relay runs through the
// ones it knew; pathup's failed try used to rebuild it 0.3 s after its
// build, with all of them, but a pair pathup leaves relayed (both behind
// NATs, one symmetric: natpath.go) is no longer rebuilt, and its relay's
// death left it unanswered past 5 s (e2e.TestNATSymmetricRelayed, fast
// timers). A tunnel short of relays is rebuilt by the lower overlay
// address only, as in pathup: the other's end is replaced by the new
// handshake. A tunnel whose first relay is down is rebuilt by either end,
// each looking at its own list: the two ends' lists need not have the
// same first relay, and when only the higher end's is the dead one, its
// replies went nowhere while the lower end, sending through a live relay,
// saw no reason to rebuild (e2e.TestNATSymmetricRelayed/lan: w2's replies
// through the killed c1 for the 5 s watched).

// relayDownAgain is how long a rebuilt peer is left to its new
// handshake. runRelayDown looks when pathWake rings (a tunnel, a member's
// status or the relay list changed: pathwake.go) and at the deadlines
// below, never on a fixed tick (issue 54: it used to look four times a
// second).
const (
	relayDownAgain = 5 * time.Second
	// relayShortSettle is how long a tunnel must be seen short of relays
	// before it is rebuilt: a tunnel whose handshake has just completed
	// adds its relays one answer at a time, and a rebuild then crossed
	// the peer's own handshakes and left a tunnel with neither a remote
	// nor a relay until Nebula's connection manager dropped it (the lab
	// soak with lan timers, 2026-12-03: b2 did not reach a4 for the 10 s
	// watched).
	relayShortSettle = 2 * time.Second
)

// relaysDown are the peers whose relayed tunnel runs through a first
// relay gossip shows suspect, failed or left (status by overlay address;
// a relay gossip does not know counts as alive: not known is no reason to
// rebuild).
func relaysDown(tunnels []mesh.Tunnel, status map[netip.Addr]gossip.Status) []netip.Addr {
	var out []netip.Addr
	for _, t := range tunnels {
		if !t.Relayed || len(t.Relays) == 0 {
			continue
		}
		switch status[t.Relays[0]] {
		case gossip.StatusSuspect, gossip.StatusFailed, gossip.StatusLeft:
			out = append(out, t.OverlayIP)
		}
	}
	return out
}

// relaysShort are the peers (above self) whose relayed tunnel runs
// through fewer relays than the overlay lists (relays, less the peer):
// built before the node list named them all. Rebuilt once, it runs
// through all of them, and a relay's death costs no more than Nebula's
// switch to the next.
func relaysShort(self netip.Addr, tunnels []mesh.Tunnel, relays []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, t := range tunnels {
		if !t.Relayed || t.OverlayIP.Compare(self) <= 0 {
			continue
		}
		want := slices.DeleteFunc(slices.Clone(relays), func(r netip.Addr) bool { return r == t.OverlayIP || r == self })
		if slices.ContainsFunc(want, func(r netip.Addr) bool { return !slices.Contains(t.Relays, r) }) {
			out = append(out, t.OverlayIP)
		}
	}
	return out
}

// runRelayDown rebuilds the tunnels relaysDown names, each at most once
// every relayDownAgain, and those relaysShort has named at every look for
// relayShortSettle, once for each relay list the overlay has applied,
// until ctx ends. It looks when pathWake rings and when a deadline of
// its own comes (a short tunnel's settle, a rebuilt peer's wait); with
// nothing relayed it sleeps until the next change.
func (rt *Runtime) runRelayDown(ctx context.Context) {
	rd := relayDown{rebuilt: map[netip.Addr]time.Time{},
		short: shortWatch{rebuiltFor: map[netip.Addr]string{}, since: map[netip.Addr]time.Time{}}}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		wake := rt.pathWake.wait() // before the look: a change during it wakes the next
		if next := rt.relayDownLook(&rd); !next.IsZero() {
			timer.Reset(max(0, next.Sub(rt.now())))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
	}
}

// relayDown is what runRelayDown remembers between looks.
type relayDown struct {
	rebuilt map[netip.Addr]time.Time // when each peer was last rebuilt for a relay down
	short   shortWatch
}

// relayDownLook is one look: it rebuilds what is due and returns when the
// next look is needed though nothing changes (zero: none).
func (rt *Runtime) relayDownLook(rd *relayDown) time.Time {
	src := rt.peers() // liveness.go
	if src == nil {
		return time.Time{}
	}
	// RelayedTunnels is a copy of a list made once per tunnel change
	// (Nebula patch 4), of the relayed tunnels alone: cheap. Gossip's
	// statuses copy every member, so they are read only when a relayed
	// tunnel needs them (issue 54).
	now, self, tunnels := rt.now(), rt.mesh.OverlayIP(), rt.mesh.RelayedTunnels()
	for ip, at := range rd.rebuilt {
		if now.Sub(at) >= time.Minute {
			delete(rd.rebuilt, ip)
		}
	}
	if len(tunnels) == 0 {
		rd.short.due(now, nil, "")
		return time.Time{}
	}
	status := src.Statuses() // a member this node's probes suspect is StatusSuspect
	relays := rt.ov.applied().Relays
	due, next := rd.short.due(now, relaysShort(self, tunnels, relays), fmt.Sprint(relays))
	for _, ip := range due {
		rt.mesh.RebuildTunnel(ip)
		rt.log.Info("rebuilt a relayed tunnel through every relay", "peer", ip, "relays", relays)
	}
	down := relaysDown(tunnels, status)
	if rt.outOfPoolWorker() { // no suspicion of a relay from the records: probe them (relayprobe.go)
		down = append(down, relaysDown(tunnels, rt.relaysUnanswered(tunnels))...)
		next = earliest(next, now.Add(relayProbeEvery))
	}
	for _, ip := range down {
		if at, ok := rd.rebuilt[ip]; ok && now.Sub(at) < relayDownAgain {
			next = earliest(next, at.Add(relayDownAgain)) // still down then: rebuilt again
			continue
		}
		rd.rebuilt[ip] = now
		rt.mesh.RebuildTunnel(ip)
		rt.log.Info("rebuilt a relayed tunnel whose relay gossip shows suspect or gone", "peer", ip)
		next = earliest(next, now.Add(relayDownAgain))
	}
	return next
}

// earliest is the earlier of two deadlines, a zero one being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// shortWatch decides when a tunnel short of relays is rebuilt: once it
// has been named at every look for relayShortSettle, and once for each
// relay list (key) the overlay applies.
type shortWatch struct {
	rebuiltFor map[netip.Addr]string    // the relay list each peer was rebuilt for
	since      map[netip.Addr]time.Time // since when each peer has been seen short
}

// due takes one look's short peers and returns those to rebuild now, and
// when the first of those still settling is due (zero: none).
func (w shortWatch) due(now time.Time, short []netip.Addr, key string) (out []netip.Addr, next time.Time) {
	maps.DeleteFunc(w.since, func(ip netip.Addr, _ time.Time) bool { return !slices.Contains(short, ip) })
	for _, ip := range short {
		if w.rebuiltFor[ip] == key {
			continue
		}
		since, ok := w.since[ip]
		if !ok {
			w.since[ip] = now
			next = earliest(next, now.Add(relayShortSettle))
			continue
		}
		if now.Sub(since) < relayShortSettle {
			next = earliest(next, since.Add(relayShortSettle))
			continue
		}
		delete(w.since, ip)
		w.rebuiltFor[ip] = key
		out = append(out, ip)
	}
	return out, next
}
