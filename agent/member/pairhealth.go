package member

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// Pair health (issue 28 item 4). Gossip cannot show a broken pair: when
// a member's direct probe of another fails, memberlist asks other
// members to probe it (indirect probes), so two nodes that cannot reach
// each other over the overlay both stay alive everywhere. So every member
// probes every other member gossip shows alive or suspect (a worker: only
// the control nodes and the peers it has traffic with, pairactive.go), from itself:
// reachAddr, a TCP connection to the member's gossip port on its overlay
// address through Nebula, which completes only with that node's
// certificate (the probe control.Hooks.Reach and `meshctl ping` make).
// A member counts unreachable after PairProbe.Misses failed probes in a
// row, reachable again after one answer (config.PairProbe has the period
// and cost). What this node cannot reach shows in its status (a
// codes.PairUnreachable warning, status.overlay.unreachable), its metrics
// (meshd_overlay_unreachable_peers) and its tunnel report, from which the
// control nodes mark the pair in `meshctl nodes` and the console's
// picture (agent/control/pairhealth.go).

// pairTarget is a member to probe: its name and gossip address on the
// overlay.
type pairTarget struct {
	name    string
	addr    netip.AddrPort
	control bool // a control node: always probed (pairactive.go)
}

// pairDown is a member's run of failed probes.
type pairDown struct {
	name   string
	since  time.Time // the run's first failed probe
	failed int       // failed probes in a row
	reason string    // the last one's
}

// pairBook counts each member's failed probes in a row; a member with
// misses or more is unreachable. Not safe for concurrent use.
type pairBook struct {
	misses int
	runs   map[string]*pairDown
}

// record counts one probe of name (err nil: it answered) and reports
// whether that changed whether name is unreachable.
func (b *pairBook) record(name string, err error, now time.Time) (changed bool) {
	r := b.runs[name]
	if err == nil {
		delete(b.runs, name)
		return r != nil && r.failed >= b.misses
	}
	if r == nil {
		if b.runs == nil {
			b.runs = map[string]*pairDown{}
		}
		r = &pairDown{name: name, since: now}
		b.runs[name] = r
	}
	r.failed++
	r.reason = dialReason(err)
	return r.failed == b.misses
}

// keep forgets every member has does not hold (no longer probed: gone
// from the records, or down in gossip, which shows that by itself). It
// looks at the runs only: O(failing members), not O(members).
func (b *pairBook) keep(has func(name string) bool) {
	for n := range b.runs {
		if !has(n) {
			delete(b.runs, n)
		}
	}
}

// down are the unreachable members, by name.
func (b *pairBook) down() []pairDown {
	var out []pairDown
	for _, r := range b.runs {
		if r.failed >= b.misses {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(x, y pairDown) int { return strings.Compare(x.name, y.name) })
	return out
}

// pairHealth probes the members and keeps their book.
type pairHealth struct {
	cfg config.PairProbe
	// targets are the members to probe, sorted by name; the same slice
	// (shared, read-only) until one changes (pairhealth_index.go), so a
	// round costs O(PerRound), not O(members).
	targets func() []pairTarget
	reach   func(context.Context, netip.AddrPort) error
	// active, if set, reports whether a target is to be probed now
	// (pairactive.go: a worker probes the control nodes and the peers it
	// has traffic with); nil probes every target.
	active func(pairTarget) bool
	log    *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	book   pairBook
	cursor string // the last member a round probed in name order (pick)
	// flipped, if set, is called after a round in which a member became
	// unreachable or reachable again (the tunnel report follows:
	// pathwake.go).
	flipped func()
}

func newPairHealth(cfg config.PairProbe, targets func() []pairTarget, reach func(context.Context, netip.AddrPort) error,
	log *slog.Logger, now func() time.Time) *pairHealth {
	return &pairHealth{cfg: cfg, targets: targets, reach: reach, log: log, now: now, book: pairBook{misses: max(1, cfg.Misses)}}
}

// run probes a round every cfg.Every until ctx ends.
func (ph *pairHealth) run(ctx context.Context) {
	tick := time.NewTicker(ph.cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ph.round(ctx)
	}
}

// round probes every target once, at most cfg.Parallel at once, each
// within cfg.Timeout, then counts the outcomes. A round cut short by ctx
// counts nothing.
func (ph *pairHealth) round(ctx context.Context) {
	all := ph.targets()
	targets := ph.pick(all)
	errs := make([]error, len(targets))
	slots := make(chan struct{}, max(1, ph.cfg.Parallel))
	var wg sync.WaitGroup
	for i, tg := range targets {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			pctx, cancel := context.WithTimeout(ctx, ph.cfg.Timeout)
			defer cancel()
			errs[i] = ph.reach(pctx, tg.addr)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	now := ph.now()
	var flipped []string
	ph.mu.Lock()
	for i, tg := range targets {
		if ph.book.record(tg.name, errs[i], now) {
			flipped = append(flipped, tg.name)
		}
	}
	ph.book.keep(func(name string) bool { _, ok := findTarget(all, name); return ok })
	down := ph.book.down()
	ph.mu.Unlock()
	if len(flipped) > 0 && ph.flipped != nil {
		ph.flipped()
	}
	for _, name := range flipped {
		i := slices.IndexFunc(down, func(d pairDown) bool { return d.name == name })
		if i < 0 {
			ph.log.Info("member reachable over the overlay again", "peer", name)
			continue
		}
		d := down[i]
		ph.log.Warn("member unreachable over the overlay", "code", codes.PairUnreachable, "peer", name,
			"failed", d.failed, "since", d.since, "reason", d.reason)
	}
}

// pick is the round's share of all (sorted by name): every member with
// failed probes (its verdict waits on its next probes), in name order,
// then the members after the last one looked at, in name order and
// wrapping, up to cfg.PerRound in all (0: no bound). With active set,
// only the members it passes are taken, and a round looks at no more
// than pairScan(PerRound) of them (pairactive.go). It costs
// O(PerRound + failing members × log members): it walks from a cursor
// and never reads every target (issue 54: at 10,000 members it sorted
// them all every round).
func (ph *pairHealth) pick(all []pairTarget) []pairTarget {
	n := ph.cfg.PerRound
	if ph.active == nil && (n <= 0 || len(all) <= n) {
		return all
	}
	if n <= 0 {
		n = len(all)
	}
	ph.mu.Lock()
	defer ph.mu.Unlock()
	var failing []string
	for name := range ph.book.runs {
		failing = append(failing, name)
	}
	slices.Sort(failing)
	out := make([]pairTarget, 0, min(n, len(all)))
	for _, name := range failing {
		if i, ok := findTarget(all, name); ok && len(out) < n {
			out = append(out, all[i])
		}
	}
	if len(all) == 0 {
		return out
	}
	start, _ := slices.BinarySearchFunc(all, ph.cursor, func(tg pairTarget, name string) int {
		if tg.name <= name {
			return -1
		}
		return 1
	})
	look := len(all)
	if ph.active != nil {
		look = min(look, pairScan(n))
	}
	for i := 0; i < look && len(out) < n; i++ {
		tg := all[(start+i)%len(all)]
		if ph.book.runs[tg.name] != nil {
			continue
		}
		ph.cursor = tg.name
		if ph.active != nil && !ph.active(tg) {
			continue
		}
		out = append(out, tg)
	}
	return out
}

// findTarget is where name is in all (sorted by name).
func findTarget(all []pairTarget, name string) (int, bool) {
	return slices.BinarySearchFunc(all, name, func(tg pairTarget, name string) int { return strings.Compare(tg.name, name) })
}

// sortTargets sorts ts by name, as pairHealth.targets hands them.
func sortTargets(ts []pairTarget) {
	slices.SortFunc(ts, func(a, b pairTarget) int { return strings.Compare(a.name, b.name) })
}

// down are the members this node counts unreachable now.
func (ph *pairHealth) down() []pairDown {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	return ph.book.down()
}

// unreachable are their names, sorted (nil when none): the tunnel
// report's, status's and the metric's.
func (ph *pairHealth) unreachable() []string {
	var out []string
	for _, d := range ph.down() {
		out = append(out, d.name)
	}
	return out
}

// fillStatus adds what status shows of pair health to s: the names in
// s.Overlay.Unreachable and a PairUnreachable warning naming them.
func (ph *pairHealth) fillStatus(s *apitype.Status) {
	down := ph.down()
	if len(down) == 0 {
		return
	}
	var names, runs []string
	for _, d := range down {
		names = append(names, d.name)
		runs = append(runs, fmt.Sprintf("%s since %s (%d probes, %s)", d.name, d.since.UTC().Format(time.RFC3339), d.failed, d.reason))
	}
	if s.Overlay != nil {
		s.Overlay.Unreachable = names
	}
	s.Warnings = append(s.Warnings, apitype.Warning{Code: codes.PairUnreachable,
		Detail: fmt.Sprintf("cannot reach %s over the overlay: %d or more of this node's probes in a row failed: %s; gossip may still show them alive",
			strings.Join(names, ", "), ph.book.misses, strings.Join(runs, "; "))})
}
