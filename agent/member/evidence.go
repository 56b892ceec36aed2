package member

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/codes"
)

// Evidence for gossip's bad news (issue 52 item 8). Memberlist's dead
// messages and serf's leave intents are relayed by every member and do
// not say who first said them: any holder of the gossip key on the
// overlay (every member's machine) can declare a live node dead or left,
// as often as it likes. So this node shows a member whose record is
// active as failed, left or leaving (its gossip view, desired.View:
// `meshctl nodes`, the console, status, metrics, and the control plane's
// decisions that read the view) only once its own direct probe of the
// record's overlay address has failed: gossipListens, a TCP connection to
// the member's gossip port through Nebula, which completes only with the
// certificate issued for that address (the probe a key rotation and `ca
// restore` make, reachOverlay, read strictly: a reset, the node's overlay
// up and its gossip not, confirms the claim), within pair health's bound
// (2 s with `timers: lan`, 500 ms with fast). Until a probe ends the member shows
// suspect; one whose probe answers shows alive. A node that is really
// dead shows failed once its probe has timed out: that bound after
// gossip's own detection.
//
// The work follows what gossip says changed, never the cluster: only the
// members gossip shows down are probed (desired.Doubted), at most
// evidenceParallel at once, and each once per claim:
//   - a failed probe stands until gossip reports the member down anew
//     (gossip.LastSeen: when this node learned it failed or left, later
//     than the probe began), so a node that stays dead is probed once;
//     without such a time (a member shown leaving, or back since) it is
//     probed again after evidenceFresh;
//   - an answer stands for evidenceFresh, then the member is probed again
//     while it is still doubted, the answer showing until the next is in:
//     a stream of forged claims about a live node costs each member one
//     probe every evidenceFresh (pair health probes every member every
//     10 s at `timers: lan` anyway).
//
// A member gossip no longer doubts keeps its entry for evidenceKeep, so a
// forged claim the node refutes and the forger makes again is not probed
// again at each turn. A look that finds a member with no probe result yet
// waits up to evidenceSettle for its probe: a node that is up answers
// over its tunnel within a round trip, so a claim about it never shows,
// not even to the look that saw it first.

const (
	// evidenceParallel bounds the probes under way at once; a member past
	// it shows suspect until a later look finds room.
	evidenceParallel = 8
	// evidenceFresh is how long an answer stands.
	evidenceFresh = 5 * time.Second
	// evidenceKeep is how long an entry outlives the member's last doubt.
	evidenceKeep = time.Minute
	// evidenceSettle is how long a look waits for the first probes of
	// the members it doubts (a dead node's, which never answers, costs a
	// look this much, once per look while the probe runs).
	evidenceSettle = 100 * time.Millisecond
)

// evidence holds this node's direct probes of the members gossip doubts.
// Safe for concurrent use; its probes run on its own goroutines, which
// close ends and waits for.
type evidence struct {
	reach func(ctx context.Context, addr netip.Addr) error
	bound time.Duration    // one probe's: the timers' (config.PairProbe's Timeout)
	now   func() time.Time // the clock gossip.LastSeen reads: the wall clock
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	running int
	probes  map[string]*probe // by node id
	results uint64            // probes whose result changed (changes)
}

// probe is what this node knows of one doubted member's overlay address.
type probe struct {
	name    string
	addr    netip.Addr
	result  desired.Probe // of the last probe that ended
	began   time.Time     // when that probe began
	ended   time.Time     // and ended
	busy    bool          // a probe is under way
	settled chan struct{} // closed when the probe under way ends
	doubted time.Time     // when a look last found gossip doubting it
	told    bool          // an answer against gossip was logged (once per entry)
}

// newEvidence probes with reach, each probe within bound: long enough
// for a node that is up to answer through Nebula, a handshake included;
// a dead node never answers, so its failure shows bound after gossip's.
func newEvidence(reach func(context.Context, netip.Addr) error, bound time.Duration, now func() time.Time, log *slog.Logger) *evidence {
	ctx, cancel := context.WithCancel(context.Background())
	return &evidence{reach: reach, bound: bound, now: now, log: log, ctx: ctx, cancel: cancel, probes: map[string]*probe{}}
}

// judge is this node's evidence about the doubted records (desired.Doubted),
// by name, for desired.Inputs.Probes; it starts the probes that are due.
// lastSeen is gossip's: when this node learned a member failed or left.
func (e *evidence) judge(doubted []desired.Record, lastSeen func(string) (time.Time, bool)) map[string]desired.Probe {
	if len(doubted) == 0 && e.idle() {
		return nil
	}
	e.settle(e.look(doubted, lastSeen))
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]desired.Probe, len(doubted))
	for _, r := range doubted {
		if p := e.probes[r.ID]; p != nil && p.addr == r.Overlay {
			out[r.Name] = p.result
		}
	}
	return out
}

// idle reports whether e holds nothing: a look with nothing doubted has
// nothing to do.
func (e *evidence) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.probes) == 0
}

// look notes the doubted records, starts the probes that are due, forgets
// the entries past evidenceKeep, and returns the probes under way of the
// members with no result yet.
func (e *evidence) look(doubted []desired.Record, lastSeen func(string) (time.Time, bool)) []chan struct{} {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	var first []chan struct{}
	for _, r := range doubted {
		p := e.probes[r.ID]
		if p == nil || p.addr != r.Overlay || p.name != r.Name {
			p = &probe{name: r.Name, addr: r.Overlay}
			e.probes[r.ID] = p
		}
		p.doubted = now
		if p.due(lastSeen, now) {
			e.start(r.ID, p)
		}
		if p.busy && p.result == desired.ProbeUnknown {
			first = append(first, p.settled)
		}
	}
	for id, p := range e.probes {
		if !p.busy && now.Sub(p.doubted) > evidenceKeep {
			delete(e.probes, id)
		}
	}
	return first
}

// settle waits up to evidenceSettle for the probes to end.
func (e *evidence) settle(probes []chan struct{}) {
	if len(probes) == 0 {
		return
	}
	t := time.NewTimer(evidenceSettle)
	defer t.Stop()
	for _, c := range probes {
		select {
		case <-c:
		case <-t.C:
			return
		}
	}
}

// due reports whether p is to be probed now.
func (p *probe) due(lastSeen func(string) (time.Time, bool), now time.Time) bool {
	switch {
	case p.busy:
		return false
	case p.result == desired.ProbeUnknown:
		return true
	case p.result == desired.ProbeFailed:
		if at, ok := lastSeen(p.name); ok {
			return at.After(p.began) // reported down again since the probe began
		}
	}
	return now.Sub(p.ended) >= evidenceFresh
}

// start runs a probe of p's address if there is room; e.mu is held.
func (e *evidence) start(id string, p *probe) {
	if e.closed || e.running >= evidenceParallel {
		return
	}
	e.running++
	p.busy, p.settled = true, make(chan struct{})
	addr, began := p.addr, e.now()
	e.wg.Go(func() {
		ctx, cancel := context.WithTimeout(e.ctx, e.bound)
		err := e.reach(ctx, addr)
		cancel()
		e.done(id, p, began, err)
	})
}

// done records the end of p's probe that began at began (err nil: it
// answered). A probe cut short by close records nothing.
func (e *evidence) done(id string, p *probe, began time.Time, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running--
	p.busy = false
	defer close(p.settled)
	if e.ctx.Err() != nil {
		return
	}
	was := p.result
	p.result, p.began, p.ended = desired.ProbeFailed, began, e.now()
	if err == nil {
		p.result = desired.ProbeAnswered
	}
	if p.result != was {
		e.results++
	}
	if err == nil {
		if !p.told && e.probes[id] == p {
			p.told = true
			e.log.Warn("gossip says a member is down, but it answers a direct probe over the overlay: shown and kept alive",
				"code", codes.GossipContradicted, "node", p.name, "overlay_ip", p.addr)
		}
		return
	}
	e.log.Debug("gossip says a member is down, and it does not answer a direct probe over the overlay", "node", p.name,
		"overlay_ip", p.addr, "took", p.ended.Sub(began).Round(time.Millisecond), "err", err)
}

// changes counts the probes whose result changed: what the gossip view
// shows of a doubted member changes only then (or when gossip or the
// records do), so pair health's index (pairhealth_index.go) rebuilds on
// it. 0 on a nil evidence.
func (e *evidence) changes() uint64 {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.results
}

// close ends the probes under way and waits for them; later looks start
// none.
func (e *evidence) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
}
