package config

import "time"

// PairProbe is how a member probes every other member over the overlay
// for pair health (issue 28 item 4; agent/member/pairhealth.go): one
// round every Every, each probe a TCP connection to the member's gossip
// port through Nebula within Timeout, at most Parallel at once. A member
// counts unreachable after Misses failed probes in a row, and reachable
// again after one answer.
type PairProbe struct {
	Every    time.Duration
	Timeout  time.Duration
	Misses   int
	Parallel int
}

// PairProbe is the pair-health probing for this config's timers. With
// `timers: lan` a member costs each other member one TCP connection over
// an existing tunnel (about five small packets) every 10 s, and a break
// shows within about 3 rounds (20-30 s), well after gossip would have
// seen a node that is down (a member gossip shows failed is not
// probed). `timers: fast` (tests) probes every second: a break shows
// within about 3 s.
func (c File) PairProbe() PairProbe {
	if c.Timers == TimersFast {
		return PairProbe{Every: time.Second, Timeout: 500 * time.Millisecond, Misses: 3, Parallel: 8}
	}
	return PairProbe{Every: 10 * time.Second, Timeout: 2 * time.Second, Misses: 3, Parallel: 4}
}
