package raftnode

import (
	"time"
)

// A new leader's FSM may not yet hold every entry committed before its
// term: after a restart raft re-applies the log only once the new leader
// commits in its term, and the entries then reach the FSM one by one. A
// leader duty that reads the FSM meanwhile decides on an old state; one
// did (CI, 2026-12-07: e2e.TestPowerLoss): the token sweep read the node
// records while the FSM held the snapshot of the node's own join (one
// record), then the tokens once the replay had reached them, and revoked a
// usable token naming a control node it took for unknown. So duties that
// write on what the FSM says ask LeaderReady first, as Consul's leader
// loop waits on a barrier before it reconciles.

// readyBarrier bounds the barrier LeaderReady waits on: the entries of a
// restart's replay apply in milliseconds; past this the duty is skipped
// and asked again at its next pass.
const readyBarrier = 2 * time.Second

// LeaderReady reports whether this node leads and its FSM has applied
// every entry before its term: a raft barrier, waited for once per term
// (later calls in the term answer from memory). False when it does not
// lead, or the barrier failed or timed out (the caller skips its duty
// until the next pass).
func (n *Node) LeaderReady() bool {
	if !n.IsLeader() {
		return false
	}
	term := n.r.CurrentTerm()
	if n.readyTerm.Load() == term {
		return true
	}
	if err := n.r.Barrier(readyBarrier).Error(); err != nil {
		return false
	}
	n.readyTerm.Store(term)
	return n.IsLeader()
}
