package enroll

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// DefaultSeedBudget is how long Enroll goes on asking a token's seeds
// again after a pass over them in which none answered, or each that did
// said it is busy (ClientDeps.SeedBudget). Issue 54 item 5: with one
// control node busy for a second (40 idle workers, then 10 joins at
// once), a join failed SeedsUnreachable while its seed was fine.
const DefaultSeedBudget = 5 * time.Second

// SlowSeedAfter is how long a seed may take, from this enrollment's first
// connection to it to its verified clock answer, before the join says it
// was slow (codes.SeedSlow, with the time).
const SlowSeedAfter = time.Second

// The wait between two passes doubles from firstPassWait up to
// maxPassWait; each is jittered (half of it, plus up to the other half at
// random), so that joins a busy seed turned away together do not come
// back together.
const (
	firstPassWait = 100 * time.Millisecond
	maxPassWait   = time.Second
)

// miss is how one attempt at a seed failed, as the passes judge it.
type miss int

const (
	missNone    miss = iota
	missRefused      // no TCP connection: refused, no route, dial timeout
	missLate         // TCP connected, then no TLS or HTTP answer in time, or the connection broke
	missBusy         // answered that it cannot serve now, for a moment (busy)
	missAside        // answered that it cannot serve this join (clock, disk, revoked leaf): not asked again
)

// again is whether another pass may fix this miss.
func (m miss) again() bool { return m == missRefused || m == missLate || m == missBusy }

// busy is whether a seed's answer says it cannot serve a join for a
// moment (no leader yet, starting, stopping, its rate bound): asked
// again in the next pass. The other answers of stepsAside are not.
func busy(err error) bool {
	switch codes.Of(err) {
	case codes.NoLeader, codes.DaemonStarting, codes.DaemonStopping, codes.ControlBusy:
		return true
	}
	return false
}

// passes is one enrollment's account of its seeds over its passes: when
// each was first tried, how often, and how it last failed.
type passes struct {
	seeds []string
	start time.Time
	until time.Time // no pass starts after it, but the second (again)
	retry bool      // false for a budget below zero: one pass only
	wait  time.Duration
	n     int // passes begun

	first   map[string]time.Time
	tries   map[string]int
	last    map[string]miss
	lastErr map[string]error
	note    map[string]string // how the last miss reads in the error
	sentTo  []string
}

func newPasses(seeds []string, budget time.Duration, now time.Time) *passes {
	return &passes{seeds: seeds, start: now, until: now.Add(max(budget, 0)), retry: budget >= 0, wait: firstPassWait,
		first: map[string]time.Time{}, tries: map[string]int{}, last: map[string]miss{}, lastErr: map[string]error{}, note: map[string]string{}}
}

// next begins a pass: the seeds it asks, in the token's order (each but
// those that stepped aside for good).
func (p *passes) next() []string {
	p.n++
	out := make([]string, 0, len(p.seeds))
	for _, s := range p.seeds {
		if p.last[s] != missAside {
			out = append(out, s)
		}
	}
	return out
}

// begin notes an attempt at seed at now: when it was first tried, and
// how many times it has been, this one included.
func (p *passes) begin(seed string, now time.Time) (since time.Time, tries int) {
	if _, ok := p.first[seed]; !ok {
		p.first[seed] = now
	}
	p.tries[seed]++
	return p.first[seed], p.tries[seed]
}

// missed notes how seed's attempt failed; note is how the error reads
// it.
func (p *passes) missed(seed string, m miss, err error, note string, sent bool) {
	p.last[seed], p.lastErr[seed], p.note[seed] = m, err, note
	if sent && !slices.Contains(p.sentTo, seed) {
		p.sentTo = append(p.sentTo, seed)
	}
}

// again is whether another pass runs, and after what wait: only when a
// seed missed in a way a moment may fix, and the budget has time left. A
// seed that accepted the connection and then answered late or busy is
// asked a second time whatever the budget: one late answer is not yet a
// consistent failure.
func (p *passes) again(now time.Time) (time.Duration, bool) {
	if !p.retry {
		return 0, false
	}
	retried, late := false, false
	for _, s := range p.seeds {
		retried = retried || p.last[s].again()
		late = late || p.last[s] == missLate || p.last[s] == missBusy
	}
	if !retried || (!now.Before(p.until) && !(p.n == 1 && late)) {
		return 0, false
	}
	d := p.wait/2 + rand.N(p.wait/2+1)
	p.wait = min(2*p.wait, maxPassWait)
	return d, true
}

// err is the enrollment's error once no pass is left, or once ctx
// stopped it (stopped). A seed whose last answer was that it cannot
// serve the join gives its code; else it is codes.SeedsUnreachable,
// saying which seeds accepted a connection and answered late (busy or
// stuck, not down) and how many passes over how long failed.
func (p *passes) err(stopped error, now time.Time) error {
	var failures []string
	var sick error
	for _, s := range p.seeds {
		e, ok := p.lastErr[s]
		if !ok {
			continue
		}
		if m := p.last[s]; m == missBusy || m == missAside {
			sick = e
		}
		failures = append(failures, s+": "+p.note[s])
	}
	if p.n > 1 {
		failures = append(failures, fmt.Sprintf("the seeds were asked in %d passes over %s", p.n, now.Sub(p.start).Round(time.Millisecond)))
	}
	if sick != nil && stopped == nil { // a seed answered but could not serve: its code says more than "unreachable"
		msg := fmt.Sprintf("no seed of %d can serve the join now: %s", len(p.seeds), strings.Join(failures, "; "))
		if len(p.sentTo) > 0 {
			msg += "; the request went to " + strings.Join(p.sentTo, ", ") + ", so run the same join again: it resumes a join the cluster recorded"
		}
		return codes.Wrap(codes.Of(sick), errors.New(msg))
	}
	return noAnswer(len(p.seeds), failures, p.sentTo, stopped)
}

// enrollSeeds sends body to the token's seeds in order, in passes (see
// Enroll), and returns the first verified answer.
func (c *client) enrollSeeds(ctx context.Context, body []byte, csrKey crypto.PublicKey) (*Response, error) {
	p := newPasses(c.tok.Seeds, c.budget, time.Now())
	for {
		for _, seed := range p.next() {
			since, tries := p.begin(seed, time.Now())
			resp, err := c.try(ctx, seed, body, since, tries)
			if err == nil {
				if err := c.check(resp, csrKey); err != nil {
					return nil, err
				}
				resp.Seed = seed
				return resp, nil
			}
			if err := c.judgeMiss(p, seed, err); err != nil {
				return nil, err
			}
			if err := stopped(ctx); err != nil {
				return nil, p.err(err, time.Now())
			}
		}
		wait, ok := p.again(time.Now())
		if !ok {
			return nil, p.err(nil, time.Now())
		}
		if p.n == 1 {
			c.step(fmt.Sprintf("no seed answered yet; asking them again for up to %s", c.budget))
		}
		c.log.Debug("asking the seeds again", "pass", p.n+1, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, p.err(ctx.Err(), time.Now())
		case <-t.C:
		}
	}
}

// judgeMiss notes how an attempt at seed failed and says so (loudly in
// the first pass, at debug level after); an error that ends the
// enrollment at once (a verification failure, a refusal about the
// token) is returned.
func (c *client) judgeMiss(p *passes, seed string, err error) error {
	logf := c.log.Warn
	if p.n > 1 {
		logf = c.log.Debug
	}
	var unreachable *seedError
	switch {
	case errors.As(err, &unreachable):
		m, what, note := missLate, "connected but gave no answer", "connected, then "+unreachable.err.Error()
		switch {
		case unreachable.noConn:
			m, what, note = missRefused, "unreachable", unreachable.err.Error()
		case unreachable.sent:
			what, note = "took the request but gave no answer", unreachable.err.Error()
		}
		logf("seed "+what, "seed", seed, "pass", p.n, "err", unreachable.err)
		if p.n == 1 {
			c.step(fmt.Sprintf("seed %s %s: %v", seed, what, unreachable.err))
		}
		p.missed(seed, m, unreachable.err, note, unreachable.sent)
		return nil
	case stepsAside(err) || busy(err):
		// A sick seed answered before or without recording anything
		// it could not undo (a join it did record resumes at the next
		// seed, or at this one in the next pass: the same request, the
		// same keys). A seed whose clock is too far off got nothing:
		// the secret is sent only after.
		m := missAside
		if busy(err) {
			m = missBusy
		}
		logf("seed cannot serve the join now; trying the next", "seed", seed, "pass", p.n, "code", codes.Of(err), "err", err)
		if p.n == 1 {
			c.step(fmt.Sprintf("seed %s cannot serve the join now (%s); trying the next", seed, codes.Of(err)))
		}
		code := codes.Of(err)
		p.missed(seed, m, err, err.Error(), code != codes.ClockSkew && code != codes.SeedRevoked) // those refuse before the secret goes out
		return nil
	}
	c.log.Warn("enroll failed", "code", codes.OrInternal(err), "seed", seed, "err", err)
	return err
}

// answered says, when seed took SlowSeedAfter or more (since its first
// attempt in this enrollment) to give its verified clock answer, that it
// was slow: a busy seed, not a down one; the join goes on.
func (c *client) answered(seed string, since time.Time, tries int) {
	took := time.Since(since)
	if took < SlowSeedAfter {
		return
	}
	took = took.Round(time.Millisecond)
	c.log.Info("seed answered late", "code", codes.SeedSlow, "seed", seed, "took", took, "tries", tries)
	c.warn(codes.SeedSlow, fmt.Sprintf("seed %s answered after %s (%s): a busy control node, not a down one; the join goes on",
		seed, took, plural(tries, "try", "tries")))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// stepsAside is whether a seed's answer says it cannot serve a join now
// (no leader, starting or stopping, a full or failing disk, a clock off
// from the other control nodes'), or its clock is too far from this
// machine's (the next seed's may agree: if none does, the join ends with
// codes.ClockSkew), so the joiner asks the token's next seed. A
// verification failure never does: it ends the join where it happened.
func stepsAside(err error) bool {
	switch codes.Of(err) {
	case codes.NoLeader, codes.DaemonStarting, codes.DaemonStopping, codes.DiskFull, codes.SeedUnfit, codes.ClockSkew, codes.SeedRevoked:
		return true
	}
	return false
}

// stopped is ctx's error, or context.DeadlineExceeded once its deadline
// has passed: a connection deadline taken from the context can fire
// before the context itself is done.
func stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// noAnswer is the error of an enrollment that no seed answered: nothing
// was sent, or the request went to sentTo and no answer came back. stopped
// is why the enrollment stopped early (the context's error), if it did.
func noAnswer(seeds int, failures, sentTo []string, stopped error) error {
	var err error
	if len(sentTo) == 0 {
		err = fmt.Errorf("no seed of %d could be reached, %w", seeds, ErrNothingSent)
	} else {
		err = fmt.Errorf("no seed of %d answered; the request went to %s, so the cluster may have recorded this join: "+
			"run the same join again to resume it", seeds, strings.Join(sentTo, ", "))
	}
	if stopped != nil {
		err = fmt.Errorf("%w; enroll stopped: %w", err, stopped)
	}
	return codes.Wrap(codes.SeedsUnreachable, fmt.Errorf("%w: %s", err, strings.Join(failures, "; ")))
}
