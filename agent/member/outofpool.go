package member

import (
	"context"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// A worker out of the gossip pool (meshd.yaml `gossip_pool: false`;
// issue 54 item 3, step iv) runs no memberlist or serf at all: it neither
// probes nor is probed, so it holds Nebula tunnels only to the control
// nodes (its lighthouses, its watch stream) and the peers it talks to,
// not to every worker. Not starting gossip (rather than starting it and
// not joining) is the choice with no O(N) cost: a serf that never joined
// would still be joined by the control nodes' rejoin, which joins every
// active record's gossip address.
//
// What it had from gossip it has otherwise:
//   - the others' liveness: its node list (LivenessRecords,
//     livenessrecords.go: workers by the control nodes' verdict, control
//     nodes by their record, since it has no pool to read them from);
//   - the revocation, key and CA notices (gossip user events that only
//     wake the follow loop early): the watch stream brings the same
//     changes as they are committed (fetched.Copies.Follow; the
//     revocations, the CA bundle and the gossip keys are in the watched
//     facts), so nothing is lost, only the wake-up;
//   - the gossip keyring: it needs none; the keys its follow loop fetches
//     are saved for a later start in the pool, and a rotation does not
//     wait for it (the control nodes' keyLaggers wait only for members
//     gossip reports);
//   - its version and signed CA report: posted by the internal API
//     (factreport.go; reportCA skips the tags);
//   - that it is out of the pool, its NAT, and its answer to a removal's
//     acknowledgement query (the revocation version its Nebula blocks):
//     posted the same way (poolfacts.go), read from its record.

// inPool reports whether this node runs gossip: every control node, and
// a worker unless its config says gossip_pool: false.
func inPool(gossipPool bool, role pki.Role) bool {
	return gossipPool || role == pki.RoleControl
}

// startPool starts gossip (startGossip) unless this node stays out of the
// pool.
func (ms *membership) startPool(ctx context.Context) error {
	if !inPool(ms.cfg.GossipPool, ms.facts.Role) {
		ms.log.Info("out of the gossip pool (gossip_pool: false): liveness from the node list, no memberlist")
		return nil
	}
	return ms.startGossip(ctx)
}

// livenessOf is where this node reads the others' liveness: asked, or
// its node list when it is out of the pool.
func (rt *Runtime) livenessOf(asked Liveness) Liveness {
	if rt.gossip == nil && rt.ctl == nil {
		return LivenessRecords
	}
	return asked
}

// spawnPoolLoops starts the loops that act on the pool: rejoining it,
// answering its queries, reporting the keyring in its tags. None runs out
// of the pool. (The CA reports run either way: out of the pool they go
// by the internal API alone, reportCA.)
func (rt *Runtime) spawnPoolLoops() {
	if rt.gossip == nil {
		return
	}
	rt.Spawn(func(ctx context.Context) { rt.members.runRejoin(ctx, rt.cfg.ReconcileInterval) })
	rt.Spawn(rt.members.answerQueries)
	rt.Spawn(rt.keys.runKeyReports)
}

// gossipEvents are gossip's events; nil (never ready) out of the pool.
func (nd *node) gossipEvents() <-chan gossip.Event {
	if nd.gossip == nil {
		return nil
	}
	return nd.gossip.Events()
}

// pairProbes reports whether pair health probes r's node: any member in
// the pool; out of it, the control nodes only. A probe of every worker
// (16 a round) would give an idle worker a tunnel to every other, the
// O(N²) this setting is for; a worker out of the pool sees a break with
// a peer by its own traffic to it (docs/architecture.md, "Gossip at
// 1,000 and 10,000 members", step 3 to probe the peers with a tunnel).
func (nd *node) pairProbes(r control.NodeRecord) bool {
	return nd.gossip != nil || r.RoleOf() == pki.RoleControl
}

// pooled is the names gossip's member list holds, unchecked against the
// records (control.Hooks.Pooled): a worker absent from it is out of the
// pool; O(members), once per gossip view.
func (ms *membership) pooled() map[string]bool {
	if ms.gossip == nil {
		return nil
	}
	ms2 := ms.gossip.Members()
	out := make(map[string]bool, len(ms2))
	for _, m := range ms2 {
		out[m.Name] = true
	}
	return out
}
