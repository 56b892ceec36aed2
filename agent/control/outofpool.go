package control

import (
	"maps"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// A worker out of the gossip pool (meshd.yaml `gossip_pool: false`; issue
// 54 item 3, step iv) is absent from gossip's member list: wherever the
// control plane reads gossip's view of a worker (node lists, carriers,
// ephemeral nodes, the tunnel view), a worker gossip does not list is
// judged by its record instead: the lighthouses' verdict (verdict.go). A
// worker gossip lists keeps gossip's word, so a cluster with workers in
// and out of the pool works.

// gossipView is hooks.Gossip with the workers it does not list judged by
// their records (outOfPool). O(records) per call, as its readers are.
func (p *Plane) gossipView() map[string]string {
	return p.gossipViewOf(p.raft.FSM().Nodes())
}

// GossipView is gossipView for the agent's readers on a control node
// whose own source is gossip alone (`meshctl routes list`): O(records) a
// call.
func (p *Plane) GossipView() map[string]string { return p.gossipView() }

// gossipViewOf is gossipView over nodes, records the caller read.
func (p *Plane) gossipViewOf(nodes []state.Node) map[string]string {
	var pooled map[string]bool
	if p.hooks.Pooled != nil {
		pooled = p.hooks.Pooled()
	}
	return outOfPool(nodes, p.hooks.Gossip(), pooled)
}

// outOfPool adds to view (by node name, gossip's words) each active
// worker it does not list and pooled (gossip's raw member names; nil:
// none) does not hold either: "alive" while its record's Unheard is zero,
// "failed" once the control nodes found it unheard; so is a worker its
// record says is out of the pool (facts: gossip may still list it failed
// from before it left), whatever gossip says. gossip is not
// changed: the answer is a copy. nil (no gossip view at all: its readers
// then judge no one by gossip) stays nil.
func outOfPool(nodes []state.Node, gossip map[string]string, pooled map[string]bool) map[string]string {
	if gossip == nil {
		return nil
	}
	view := maps.Clone(gossip)
	judge := func(n state.Node, word string) {
		if _, listed := gossip[n.Name]; (listed || pooled[n.Name]) && !n.OutOfPool {
			return // gossip's word, or a member gossip heard of but did not match to this record: no word
		}
		view[n.Name] = word
	}
	for _, n := range nodes { // a departed worker first: an active record of its name (reused) has the last word
		if departedWorker(n) {
			judge(n, "left")
		}
	}
	for _, n := range nodes {
		if !judged(n) {
			continue
		}
		if n.Unheard.IsZero() {
			judge(n, "alive")
		} else {
			judge(n, "failed")
		}
	}
	return view
}

// departedWorker reports whether n is a worker's record that departed
// (left, removed, failed): out of the pool, gossip never says "left" of
// it, so its record does.
func departedWorker(n state.Node) bool {
	return n.State.Former() && n.Role == pki.RoleWorker
}

// lastSeenIn is hooks.LastSeen, or for an active worker of nodes that
// gossip has no word on, when the control nodes found it unheard. Built
// once per read of the records (a map of the unheard workers only), so a
// reader asking for every record costs O(records), not O(records²).
func (p *Plane) lastSeenIn(nodes []state.Node) func(name string) (time.Time, bool) {
	unheard := map[string]time.Time{}
	out := map[string]bool{}  // recorded out of the pool: gossip's last sight of it is stale
	for _, n := range nodes { // a departed worker first, as outOfPool judges: its departure is when it was last seen
		if departedWorker(n) {
			unheard[n.Name], out[n.Name] = n.Updated, n.OutOfPool
		}
	}
	for _, n := range nodes {
		if judged(n) {
			delete(unheard, n.Name)
			out[n.Name] = n.OutOfPool
		}
		if judged(n) && !n.Unheard.IsZero() {
			unheard[n.Name] = n.Unheard
		}
	}
	return func(name string) (time.Time, bool) {
		if at, ok := p.hooks.LastSeen(name); ok && !out[name] {
			return at, true
		}
		at, ok := unheard[name]
		return at, ok
	}
}

// poolMembers are the names of expect a removal waits for to acknowledge
// its revocation over gossip (confirmRevocation): those gossip lists,
// unless their record says they left the pool (a worker restarted with
// `gossip_pool: false` stays listed, failed, for a while). The others
// acknowledge by their records (recordacks.go). Without a gossip view
// (nil), every one of expect not recorded out of the pool.
func poolMembers(expect map[string]state.Node, gossip map[string]string) map[string]bool {
	out := make(map[string]bool, len(expect))
	for name, n := range expect {
		if _, listed := gossip[name]; (listed || gossip == nil) && !n.OutOfPool {
			out[name] = true
		}
	}
	return out
}
