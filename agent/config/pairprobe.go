package config

import "time"

// PairProbe is how a member probes the other members over the overlay
// for pair health (issue 28 item 4; agent/member/pairhealth.go): one
// round every Every, each probe a TCP connection to the member's gossip
// port through Nebula within Timeout, at most Parallel at once. A member
// counts unreachable after Misses failed probes in a row, and reachable
// again after one answer. A round probes at most PerRound members: those
// with failed probes, then the next ones in name order, so a node's cost
// does not grow with the cluster (issue 54: every member every round was
// a probe, and a tunnel, to each of them).
type PairProbe struct {
	Every    time.Duration
	Timeout  time.Duration
	Misses   int
	Parallel int
	PerRound int
}

// PairProbe is the pair-health probing for this config's timers. With
// `timers: lan` a member makes at most PerRound probes every 10 s, each
// one TCP connection over a tunnel (about five small packets). Up to
// PerRound+1 nodes every pair is probed every round and a break shows
// within about 3 rounds (20-30 s), well after gossip would have seen a
// node that is down (a member gossip shows failed is not probed); in a
// larger cluster a break shows within 3 rounds of its first probe, which
// comes within N/PerRound rounds. A worker probes, of the members, only
// the control nodes and the peers it has traffic with, looking at no
// more than 16 × PerRound a round (agent/member/pairactive.go): a probe
// would keep an idle tunnel open. `timers: fast` (tests) probes every
// second: a break shows within about 3 s.
func (c File) PairProbe() PairProbe {
	if c.Timers == TimersFast {
		return PairProbe{Every: time.Second, Timeout: 500 * time.Millisecond, Misses: 3, Parallel: 8, PerRound: pairPerRound}
	}
	return PairProbe{Every: 10 * time.Second, Timeout: 2 * time.Second, Misses: 3, Parallel: 4, PerRound: pairPerRound}
}

// pairPerRound bounds a pair-health round: up to 17 nodes every member is
// probed every round, as before; in a cluster of 1,000 a member is probed
// by each other about every 10 min with lan timers, and a break among the
// members it is probing shows within 3 rounds (one per 10 s).
const pairPerRound = 16
