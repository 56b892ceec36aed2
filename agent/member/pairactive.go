package member

import (
	"cmp"
	"time"

	"github.com/meshd/meshd/mesh"
)

// Which members a worker's pair health probes (issue 54 item 3, step 3).
// A worker closes idle tunnels (mesh.IdleTimeout), and a probe is a TCP
// connection through the tunnel: a worker that probed every member gossip
// shows alive (16 a round) gave itself a tunnel to every other worker,
// kept open by the probes themselves. So a worker probes, of its targets
// (pairhealth_index.go), only:
//   - the control nodes (its lighthouses: their tunnels stay up anyway);
//   - the peers whose tunnel carried a packet other than probes and gossip
//     (anything not to or from the gossip port: mesh.Mesh.LastTraffic,
//     Nebula patch 10) within pairRecent: a break matters where traffic
//     flows, and there the pair's own traffic would stall.
// A member with failed probes is probed until it answers, whatever its
// traffic (its verdict waits on them: pick). A peer this worker stopped
// talking to is probed for pairRecent more, then its tunnel idles out
// mesh.IdleTimeout after the last probe. Control nodes probe every target,
// as before: they hold a tunnel to every worker (the host updates).
//
// Cost: a round looks at no more than pairScan(PerRound) targets, each
// one host map lookup in Nebula, whatever the cluster's size: at 10,000
// members with lan timers (16 a round, so 256 looked at) a peer with
// traffic is reached within 40 rounds (under 7 minutes) where the whole
// list took 625. TestPairActiveRoundsAt10000 counts it.

// pairRecent is how long after its last packet of traffic a peer is
// still probed: the tunnel's own idle timeout (mesh.IdleTimeout, or
// IdleTimeoutFast under `timers: fast`), so that a tunnel probed but no
// longer used closes at most twice that (plus Nebula's look, every
// connection_alive_interval) after its last use.
func (rt *Runtime) pairRecent() time.Duration {
	return cmp.Or(rt.ov.meshBase.IdleAfter(), mesh.IdleTimeout)
}

// pairScan is how many targets a round of perRound probes looks at:
// 16 each, at least 64.
func pairScan(perRound int) int {
	return max(64, 16*perRound)
}

// pairActive reports whether this worker probes tg now: a control node,
// or a peer its tunnel carried traffic with within pairRecent. O(1).
func (rt *Runtime) pairActive(tg pairTarget) bool {
	if tg.control {
		return true
	}
	if rt.mesh == nil {
		return false
	}
	at, ok := rt.mesh.LastTraffic(tg.addr.Addr())
	return ok && !at.IsZero() && time.Since(at) < rt.pairRecent() // time.Since: LastTraffic's clock
}
