package gossip

import (
	"log/slog"
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
// New itself. It builds the Gossip exactly as New does: only the timers
// differ.
func newDilated(cfg Config, k int) (*Gossip, error) {
	if k <= 1 {
		return New(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "gossip")
	if err := probeBind(cfg.BindAddr, cfg.BindPort); err != nil {
		return nil, err
	}
	g := &Gossip{
		name:    cfg.Name,
		log:     log,
		sink:    newLogSink(log),
		serfCh:  make(chan serf.Event, serfEventBuffer),
		events:  newEventQueue(eventBuffer),
		queries: make(chan Query, queryBuffer),
		stop:    make(chan struct{}),
	}
	sc, err := cfg.serfConfig(g.serfCh, g.sink.logger())
	if err != nil {
		return nil, err
	}
	dilateSerf(sc, k)
	g.ring = sc.MemberlistConfig.Keyring
	g.wg.Go(g.pump)
	s, err := serf.Create(sc)
	if err != nil {
		close(g.stop)
		g.wg.Wait()
		return nil, createError(cfg, err)
	}
	g.serf = s
	return g, nil
}
