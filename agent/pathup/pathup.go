package pathup

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// Overlay is what the Upgrader needs of the running overlay.
type Overlay interface {
	// Relayed lists the peers (overlay addresses) whose established
	// tunnel goes through a relay now.
	Relayed() []netip.Addr
	// Candidates asks the lighthouses about peer and returns the
	// underlay addresses they hold for it; the query has each lighthouse
	// tell the peer to punch towards this node.
	Candidates(peer netip.Addr) []netip.AddrPort
	// UseDirect points the established tunnel to peer at addr; false when
	// there is no such tunnel any more.
	UseDirect(peer netip.Addr, addr netip.AddrPort) bool
	// Rebuild drops the tunnel to peer on this side and starts a new
	// handshake at once.
	Rebuild(peer netip.Addr)
	// NoDirect reports that no direct path can exist to peer (both nodes
	// behind NATs, at least one of them symmetric: neither can punch a
	// hole the other's packets arrive through), and why. A try would only
	// rebuild the tunnel, a gap in the pair's traffic for nothing. It is
	// asked at every look, so a peer whose answer changes (one of the two
	// moved networks) is tried again; when either side is not known it
	// must answer false, and the peer is tried as if it were not asked.
	NoDirect(peer netip.Addr) (reason string, ok bool)
	// Changes is a channel closed when Relayed's or NoDirect's answer
	// may have changed (a tunnel changed, a member's NAT report or this
	// node's): the Upgrader looks then, and at its own deadlines, never
	// on a fixed tick (issue 54).
	Changes() <-chan struct{}
}

// Probe checks that peer answers through its tunnel within ctx.
type Probe func(ctx context.Context, peer netip.Addr) error

// Config is the Upgrader's timing.
type Config struct {
	// Settle is how long a try waits after asking the lighthouses, for
	// the peer's punch to open its NAT towards this node: Nebula punches
	// punchy.delay (mesh.PunchDelay, 100 ms) after a lighthouse tells it
	// to, and the lighthouse's word may cross the sites' 50 ms link.
	Settle time.Duration
	// ProbeTimeout bounds each address's probe.
	ProbeTimeout time.Duration
	// Backoff is the wait before each try for one peer: the first from
	// when its tunnel was first seen relayed, each next from the try
	// before; the last step repeats.
	Backoff []time.Duration
	// MaxCandidates bounds the addresses tried in one try.
	MaxCandidates int
	// Forget is how long a peer's schedule outlives its relayed tunnel.
	// A failed try rebuilds the tunnel, which is not relayed while its
	// handshake runs: forgotten at once, the peer would be tried again at
	// the first step, rebuilt again, and its traffic lost every 2 s for
	// good (the fast-timer gossip on the sites lab suspected the pair
	// every 2 s until this was kept).
	Forget time.Duration
}

// DefaultConfig is the timing meshd runs with, whatever its timers: a
// relayed tunnel that can go direct does within about 1 s of being built
// (seen relayed at its tunnel's change, the first try at 300 ms, then 400 ms for
// the peer's punch, then a probe that answers in a round trip); a pair that cannot is tried again
// after 5 s, 30 s, 2 min, then every 10 min. A peer not relayed for a
// minute (its tunnel gone direct, or closed) starts from the beginning
// when it is relayed again.
func DefaultConfig() Config {
	return Config{Settle: 400 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond,
		Backoff:       []time.Duration{300 * time.Millisecond, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute},
		MaxCandidates: 4, Forget: time.Minute}
}

// Upgrader moves relayed tunnels onto direct paths (see the package doc).
// Of two nodes, the one with the lower overlay address tries: two
// upgraders moving one tunnel in opposite ways at once would each rebuild
// it under the other's probe.
type Upgrader struct {
	cfg   Config
	self  netip.Addr
	ov    Overlay
	probe Probe
	log   *slog.Logger
	now   func() time.Time
	peers map[netip.Addr]*peer // relayed peers, by overlay address; only run's goroutine touches it

	upgraded, failed, skipped atomic.Uint64
}

// peer is what the Upgrader remembers of one relayed peer.
type peer struct {
	next  time.Time // when the next try is due
	tries int       // tries so far
	gone  time.Time // when a look first saw its tunnel not relayed (zero: relayed at the last look)
	// hopeless is set while Overlay.NoDirect says there is no direct
	// path: the peer is not tried, and the skip was counted and logged
	// once, when it began.
	hopeless bool
}

// New returns an Upgrader for the node at overlay address self; Run
// starts it.
func New(cfg Config, self netip.Addr, ov Overlay, probe Probe, log *slog.Logger, now func() time.Time) *Upgrader {
	return &Upgrader{cfg: cfg, self: self, ov: ov, probe: probe, log: log, now: now, peers: map[netip.Addr]*peer{}}
}

// Counts are, since start, the tries that moved a tunnel onto a direct
// path, those that found none, and the peers not tried because no direct
// path can exist to them (Overlay.NoDirect), each counted once each time
// it began to be skipped.
func (u *Upgrader) Counts() (upgraded, failed, skipped uint64) {
	return u.upgraded.Load(), u.failed.Load(), u.skipped.Load()
}

// Run looks at the relayed tunnels at start, whenever Overlay.Changes
// says they or a NAT changed, and when the next try is due, until ctx
// ends. With nothing relayed it waits for a change alone.
func (u *Upgrader) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		changed := u.ov.Changes() // before the look: a change during it wakes the next
		if next := u.Step(ctx); !next.IsZero() {
			timer.Reset(max(0, next.Sub(u.now())))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer.C:
		}
	}
}

// Step is one look: it forgets peers not relayed for Config.Forget
// (their schedule starts again should they be relayed again) and tries
// each one due that a direct path can reach (Overlay.NoDirect). It
// returns when the next try is due (zero: none), the time Run must look
// again though nothing changes. Looks come at every change of the
// relayed set, so a peer's gone time is when its tunnel stopped being
// relayed.
func (u *Upgrader) Step(ctx context.Context) time.Time {
	now := u.now()
	relayed := slices.DeleteFunc(u.ov.Relayed(), func(ip netip.Addr) bool { return ip.Compare(u.self) <= 0 })
	for ip, p := range u.peers {
		switch {
		case !p.gone.IsZero() && now.Sub(p.gone) >= u.cfg.Forget:
			delete(u.peers, ip)
		case slices.Contains(relayed, ip):
			p.gone = time.Time{}
		case p.gone.IsZero():
			p.gone = now
		}
	}
	var next time.Time
	for _, ip := range relayed {
		p := u.peers[ip]
		if p == nil {
			p = &peer{next: now.Add(u.wait(0))}
			u.peers[ip] = p
		}
		if u.hopeless(ip, p) || ctx.Err() != nil {
			continue
		}
		if now.Before(p.next) {
			next = earliest(next, p.next)
			continue
		}
		p.tries++
		if u.try(ctx, ip) {
			delete(u.peers, ip)
			continue
		}
		p.next = u.now().Add(u.wait(p.tries))
		next = earliest(next, p.next)
	}
	return next
}

// earliest is the earlier of two deadlines, a zero one being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// hopeless asks Overlay.NoDirect about ip and keeps p.hopeless in line,
// counting and logging each change once: a pair behind symmetric NATs
// stays relayed for good and is never rebuilt, and should the answer
// change the peer is tried at once if its next try is due (one moved
// networks).
func (u *Upgrader) hopeless(ip netip.Addr, p *peer) bool {
	reason, no := u.ov.NoDirect(ip)
	switch {
	case no && !p.hopeless:
		u.skipped.Add(1)
		u.log.Info("relayed peer not tried: no direct path can exist to it", "peer", ip, "reason", reason)
	case !no && p.hopeless:
		u.log.Info("relayed peer tried again: a direct path may exist now", "peer", ip)
	}
	p.hopeless = no
	return no
}

// wait is the backoff before try number n+1 (n tries made).
func (u *Upgrader) wait(n int) time.Duration {
	if len(u.cfg.Backoff) == 0 {
		return 0
	}
	return u.cfg.Backoff[min(n, len(u.cfg.Backoff)-1)]
}

// try moves the tunnel to ip onto the first candidate address that
// answers a probe; when none does it rebuilds the tunnel.
func (u *Upgrader) try(ctx context.Context, ip netip.Addr) bool {
	var cands []netip.AddrPort
	for _, a := range u.ov.Candidates(ip) {
		if a.IsValid() && a.Port() != 0 && !slices.Contains(cands, a) && len(cands) < u.cfg.MaxCandidates {
			cands = append(cands, a)
		}
	}
	if len(cands) == 0 {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(u.cfg.Settle):
	}
	moved := false
	for _, a := range cands {
		if !u.ov.UseDirect(ip, a) {
			return false // the tunnel is gone: nothing to move, nothing to rebuild
		}
		moved = true
		pctx, cancel := context.WithTimeout(ctx, u.cfg.ProbeTimeout)
		err := u.probe(pctx, ip)
		cancel()
		if err == nil {
			u.upgraded.Add(1)
			u.log.Info("tunnel moved from its relay to a direct path", "peer", ip, "remote", a)
			return true
		}
	}
	if moved {
		u.ov.Rebuild(ip)
	}
	u.failed.Add(1)
	u.log.Debug("no direct path to a relayed peer; its tunnel is built again", "peer", ip, "tried", cands)
	return false
}
