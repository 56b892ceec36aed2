package desired

import (
	"slices"

	"github.com/meshd/meshd/gossip"
)

// Probe is what this node's own direct probe of a member's record's
// overlay address found (agent/member/evidence.go: a TCP connection to its
// gossip port through Nebula, which completes only with the certificate
// issued for that address).
type Probe uint8

const (
	ProbeUnknown  Probe = iota // not probed for this claim yet, or the probe is still under way
	ProbeAnswered              // it answered: the node is up, whatever gossip says
	ProbeFailed                // no answer: gossip's word stands
)

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
//
// And one rule of evidence (issue 52 item 8): gossip's bad news about a
// member whose record is active (failed, left, leaving: Doubted) is
// shown only once this node's own direct probe of its overlay address
// has failed (Inputs.Probes). Memberlist's dead messages and serf's leave
// intents are relayed by every member and do not say who first said
// them, so any holder of the gossip key on the overlay can declare a
// live node dead; only the node's own answer through Nebula, or its
// silence, tells. A member whose probe answered is StatusAlive; one not
// probed yet is StatusSuspect.
func View(in Inputs) map[string]gossip.Status {
	gone := make(map[string]bool, len(in.Gone))
	for _, id := range in.Gone {
		gone[id] = true
	}
	out := make(map[string]gossip.Status, len(in.Members))
	mt := newMatch(in)
	for _, m := range in.Members {
		st := m.Status
		switch {
		case m.ID != "" && gone[m.ID]:
			st = gossip.StatusLeft
		case m.Name == in.SelfName:
		case mt.mismatch(m) != "":
			continue
		case badNews(st):
			switch in.Probes[m.Name] {
			case ProbeAnswered:
				st = gossip.StatusAlive
			case ProbeUnknown:
				st = gossip.StatusSuspect
			}
		}
		out[m.Name] = st
	}
	return out
}

// Doubted are the records of the members whose bad news View shows only
// on a failed probe: members that count (this node aside), not gone in
// raft, that gossip shows failed, left or leaving. Only these are probed:
// the work follows what gossip says changed, never the whole cluster.
func Doubted(in Inputs) []Record {
	var out []Record
	mt := newMatch(in)
	for _, m := range in.Members {
		if m.Name == in.SelfName || !badNews(m.Status) || mt.mismatch(m) != "" { // a member gone in raft has no active record
			continue
		}
		if i := slices.IndexFunc(in.Records, func(r Record) bool { return r.ID == m.ID }); i >= 0 {
			out = append(out, in.Records[i])
		}
	}
	return out
}

// badNews is a status that says a member is down or going: what anyone
// holding the gossip key can say of anyone.
func badNews(st gossip.Status) bool {
	return st == gossip.StatusFailed || st == gossip.StatusLeft || st == gossip.StatusLeaving
}

// Counts reports whether the gossip member m counts (see Member): this
// node, or a member matching an active record from its overlay address.
// Its liveness, version and keyring and CA reports are read only then.
// One call is O(records): for many members use NewMatcher.
func Counts(in Inputs, m Member) bool { return NewMatcher(in).Counts(m) }
