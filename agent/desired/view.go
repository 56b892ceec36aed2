package desired

import "github.com/meshd/meshd/gossip"

// View is this node's gossip view: each gossip member's status by name, as
// `meshctl status` counts it (gossip.members, gossip.alive), `meshctl
// nodes` shows it (the gossip column) and the gossip metrics report it.
//
// It holds this node and the members that count (Member: matching an
// active record and gossiping from its overlay address); a member that
// does not count is not in it, so a key holder named like a stopped node
// cannot make it look alive (issue 27; Unmatched lists them). On top,
// one rule of raft's: a member whose node id raft records as gone (left,
// removed or failed: Inputs.Gone) is gossip.StatusLeft from the moment
// this node knows the record, whatever serf says. A control node knows
// when its FSM applies the entry; a worker when it fetches the revocation
// list, which a removal tells it to do at once (the gossip notification
// and the removal's acknowledgement query). serf would follow only later:
// a removed node that keeps running refutes the force-leave until Nebula
// blocks its certificate and the key rotation cuts it off, and then
// memberlist's failure detector takes seconds to declare it (with `timers:
// lan` a 1 s probe interval and a suspicion timeout of 4 s or more).
func View(in Inputs) map[string]gossip.Status {
	gone := make(map[string]bool, len(in.Gone))
	for _, id := range in.Gone {
		gone[id] = true
	}
	out := make(map[string]gossip.Status, len(in.Members))
	for _, m := range in.Members {
		st := m.Status
		switch {
		case m.ID != "" && gone[m.ID]:
			st = gossip.StatusLeft
		case m.Name == in.SelfName:
		case mismatch(in, m) != "":
			continue
		}
		out[m.Name] = st
	}
	return out
}

// Counts reports whether the gossip member m counts (see Member): this
// node, or a member matching an active record from its overlay address.
// Its liveness, version and keyring and CA reports are read only then.
func Counts(in Inputs, m Member) bool {
	return m.Name == in.SelfName || mismatch(in, m) == ""
}
