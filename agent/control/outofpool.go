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
// "failed" once the control nodes found it unheard. gossip is not
// changed: the answer is a copy. nil (no gossip view at all: its readers
// then judge no one by gossip) stays nil.
func outOfPool(nodes []state.Node, gossip map[string]string, pooled map[string]bool) map[string]string {
	if gossip == nil {
		return nil
	}
	view := maps.Clone(gossip)
	for _, n := range nodes {
		if !judged(n) {
			continue
		}
		if _, listed := view[n.Name]; listed || pooled[n.Name] {
			continue // gossip's word, or a member gossip heard of but did not match to this record: no word
		}
		if n.Unheard.IsZero() {
			view[n.Name] = "alive"
		} else {
			view[n.Name] = "failed"
		}
	}
	return view
}

// lastSeenIn is hooks.LastSeen, or for a worker of nodes that gossip has
// no word on (out of the pool): when the control nodes found it unheard,
// if active; if it left or was removed, when they last found it unheard,
// else when it departed (heard until then: the verdict had not failed
// it). Built once per read of the records (a map of the unheard and the
// departed workers, which former_retention bounds), so a reader asking
// for every record costs O(records), not O(records²).
func (p *Plane) lastSeenIn(nodes []state.Node) func(name string) (time.Time, bool) {
	unheard := map[string]time.Time{}
	for _, n := range nodes {
		switch {
		case judged(n) && !n.Unheard.IsZero():
			unheard[n.Name] = n.Unheard
		case n.Role == pki.RoleWorker && (n.State == state.NodeLeft || n.State == state.NodeRemoved):
			unheard[n.Name] = n.Updated
			if !n.Unheard.IsZero() {
				unheard[n.Name] = n.Unheard
			}
		}
	}
	return func(name string) (time.Time, bool) {
		if at, ok := p.hooks.LastSeen(name); ok {
			return at, true
		}
		at, ok := unheard[name]
		return at, ok
	}
}

// poolMembers are the names of expect a removal waits for to acknowledge
// its revocation over gossip (confirmRevocation): those gossip lists. A
// worker out of the pool cannot answer the query: it is listed pending at
// once, not waited for until the bound (a known gap until acknowledgements
// are posted over the internal API). Without a gossip view (nil), every
// one of expect.
func poolMembers(expect map[string]state.Node, gossip map[string]string) map[string]bool {
	out := make(map[string]bool, len(expect))
	for name := range expect {
		if _, listed := gossip[name]; listed || gossip == nil {
			out[name] = true
		}
	}
	return out
}
