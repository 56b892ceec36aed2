package desired

import "github.com/meshd/meshd/gossip"

// View is this node's gossip view: each gossip member's status by name, as
// `meshctl status` counts it (gossip.members, gossip.alive), `meshctl
// nodes` shows it (the gossip column) and the gossip metrics report it.
//
// It is serf's member list with one rule of raft's on top: a member whose
// node id raft records as gone (left, removed or failed: Inputs.Gone) is
// gossip.StatusLeft from the moment this node knows the record, whatever
// serf says. A control node knows when its FSM applies the entry; a worker
// when it fetches the revocation list, which a removal tells it to do at
// once (the gossip notification and the removal's acknowledgement query).
// serf would follow only later: a removed node that keeps running refutes
// the force-leave while it still holds the gossip key, and once the key
// rotation has cut it off, memberlist's failure detector takes seconds to
// declare it (with `timers: lan` a 1 s probe interval and a suspicion
// timeout of 4 s or more). A member whose id is not gone shows serf's
// status, including members not yet on record (a joiner) and this node.
func View(in Inputs) map[string]gossip.Status {
	gone := make(map[string]bool, len(in.Gone))
	for _, id := range in.Gone {
		gone[id] = true
	}
	out := make(map[string]gossip.Status, len(in.Members))
	for _, m := range in.Members {
		st := m.Status
		if m.ID != "" && gone[m.ID] {
			st = gossip.StatusLeft
		}
		out[m.Name] = st
	}
	return out
}
