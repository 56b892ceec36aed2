package member

import (
	"net/netip"
	"time"

	"github.com/meshd/meshd/gossip"
)

// Where a node reads the other members (issue 54 item 3, step iii): who
// they are, whether each is alive, and what each advertises. Every reader
// of the others' liveness asks livenessSource (nd.peers), never gossip's
// member list: the gossip view in status, `nodes` and the metrics
// (views.go, metrics.go), the members that count and their reports
// (membership.go), pair health's targets (pairhealth_index.go), the
// relay-down loop and the bell that wakes it and the path upgrades
// (relaydown.go, pathwake.go), a peer's NAT (natpath.go) and the routes'
// carriers (subnets.go). What stays on gossip is the pool itself: joining
// and rejoining it (missingPeers), this node's own tags (its NAT, keyring
// and CA reports), the queries it answers and the notices it sends.
//
// Two sources:
//   - gossip (*gossip.Gossip itself): the default, and always on a
//     control node, whose liveness verdicts come from it;
//   - a worker's node list (recordLiveness, livenessrecords.go): a worker
//     is alive while its record is active and Unheard is zero, failed
//     since Unheard otherwise (the control nodes' verdict); a control
//     node's liveness still comes from gossip (control nodes stay in the
//     pool). Selected by Options.Liveness.

// livenessSource is what the readers above ask. *gossip.Gossip is one.
type livenessSource interface {
	// Members are the members this node knows, itself included, as
	// gossip's tags describe them (the tags desired.Member reads, and
	// what each advertises: version, NAT, keyring and CA reports), with
	// their status. A copy of every member: read it on a change, not on
	// a timer.
	Members() []gossip.Member
	// Statuses are each member's status by the overlay address it
	// gossips from, a member this node's own probes suspect as
	// gossip.StatusSuspect.
	Statuses() map[netip.Addr]gossip.Status
	// Changes is closed at the next change of a member's status or of
	// what it advertises. Take it before reading.
	Changes() <-chan struct{}
	// LastSeen is when this node learned that member name failed or left
	// (about when it was last heard); ok is false for a member alive.
	LastSeen(name string) (at time.Time, ok bool)
}

var (
	_ livenessSource = (*gossip.Gossip)(nil)
	_ livenessSource = (*recordLiveness)(nil)
)

// Liveness says where a worker reads the other members' liveness
// (Options.Liveness): LivenessRecords for a worker whose meshd.yaml says
// gossip_pool: false (outofpool.go); tests set it too.
type Liveness uint8

const (
	// LivenessGossip reads gossip's member list (the default).
	LivenessGossip Liveness = iota
	// LivenessRecords reads the node list's records (their Unheard), the
	// control nodes' liveness from gossip. A control node ignores it.
	LivenessRecords
)

// peers is where this node reads the others' liveness: the record-fed
// source Start chose (startLiveness), else gossip; nil before gossip runs.
func (nd *node) peers() livenessSource {
	if nd.heard != nil {
		return nd.heard
	}
	if nd.gossip != nil {
		return nd.gossip
	}
	return nil
}

// startLiveness selects the source of the others' liveness: a worker
// asked for LivenessRecords reads its node list, every other node gossip.
// Called once in Start, after the control plane (a control node's
// cluster facts are its raft) and before the loops that read it.
func (rt *Runtime) startLiveness(from Liveness) {
	if from != LivenessRecords || rt.ctl != nil {
		return
	}
	var pool livenessSource
	if rt.gossip != nil {
		pool = rt.gossip
	}
	rt.heard = newRecordLiveness(rt.cluster, pool, rt.facts.NodeID, time.Now) // time.Now: the clock gossip.LastSeen reads
	rt.Spawn(rt.heard.run)
}

// recordsChanged is called when the node list changed (the watch stream
// applied a change): the record-fed source reads the change now, so the
// loops waiting on Changes wake. Nothing with gossip as the source.
func (nd *node) recordsChanged() {
	if nd.heard != nil {
		nd.heard.sync()
	}
}
