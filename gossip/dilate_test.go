package gossip

import (
	"time"

	"github.com/hashicorp/serf/serf"
)

// Time dilation for the gossip simulation: every serf and memberlist timer
// multiplied by k, so that a simulated cluster needs 1/k of the CPU per
// second of wall time for the same protocol (k times fewer probes, gossip
// rounds and push/pulls per second; the same number of each per protocol
// period) and tolerates k times longer stalls of this one process. The
// multipliers (SuspicionMult, RetransmitMult, the awareness multiplier)
// stay, so every protocol period and every bound derived from the timers
// is k times longer: a dilated run's times divided by k are what the
// undilated protocol would show if the process kept up. Used only where
// the real-time simulation does not keep up (see docs/performance.md);
// compared against an undilated run at a size that does.

// dilateSerf multiplies every timer of sc (and its memberlist
// configuration) by k.
func dilateSerf(sc *serf.Config, k int) {
	if k <= 1 {
		return
	}
	d := time.Duration(k)
	ml := sc.MemberlistConfig
	for _, t := range []*time.Duration{
		&ml.TCPTimeout, &ml.PushPullInterval, &ml.ProbeInterval, &ml.ProbeTimeout,
		&ml.GossipInterval, &ml.GossipToTheDeadTime, &ml.DeadNodeReclaimTime, &ml.QueueCheckInterval,
		&sc.BroadcastTimeout, &sc.LeavePropagateDelay, &sc.ReapInterval, &sc.ReconnectInterval,
		&sc.ReconnectTimeout, &sc.TombstoneTimeout, &sc.FlapTimeout, &sc.QueueCheckInterval,
		&sc.RecentIntentTimeout, &sc.CoalescePeriod, &sc.QuiescentPeriod,
		&sc.UserCoalescePeriod, &sc.UserQuiescentPeriod,
	} {
		*t *= d
	}
}

// newDilated is New with every timer dilated by k (dilateSerf); k <= 1 is
// New itself. Only the timers differ from New.
func newDilated(cfg Config, k int) (*Gossip, error) {
	if k <= 1 {
		return New(cfg)
	}
	return create(cfg, func(sc *serf.Config) { dilateSerf(sc, k) })
}
