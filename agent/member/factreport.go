package member

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// A member's facts by the internal API (issue 54 item 3; agent/control/
// facts.go): the version it runs and its signed CA report, posted to a
// control node when they change, beside its gossip tags ("ver", "ca",
// "cas"), which stay until workers leave the gossip pool. reportCA
// offers the CA report each time it looks (at start, a CA bundle adopted,
// the overlay applied a config: a certificate reissued); the reporter
// posts only what differs from what a control node last took, after a
// random wait up to factJitter (10,000 members adopt a bundle at once),
// and retries a failed post with a doubling wait (jittered, at most
// factRetryMax) through the next control node. No timer runs while what
// was posted is what runs.

const (
	// factJitter spreads the members' posts after a change they all see.
	factJitter = 2 * time.Second
	// factRetryMin and factRetryMax bound the wait after a failed post.
	factRetryMin = time.Second
	factRetryMax = time.Minute
	// factPostBound bounds one post (a control node waits for its raft
	// write, which a new leader's election can hold up).
	factPostBound = 15 * time.Second
)

// factReporter posts this node's facts when they change.
type factReporter struct {
	// sign is this node's signature of a CA report (pki.AttestCA).
	sign func(ca string) ([]byte, error)
	// post sends a report: to a control node (a worker), or into the
	// control plane's own batch (a control node); skip turns the seeds.
	post     func(ctx context.Context, req control.FactsRequest, skip int) error
	jitter   time.Duration // factJitter (tests: less)
	retryMin time.Duration // factRetryMin (tests: less)
	wake     chan struct{}
	log      *slog.Logger

	mu    sync.Mutex
	want  factsSent // what runs now: the version, and what was offered last
	sent  factsSent
	posts int // posts made, failed or not (tests)
}

// factsSent is what a node's facts say: what a control node last took,
// or what runs now. nat, pool and revoked are a worker's out of the
// gossip pool (poolfacts.go); empty or zero, they say nothing.
type factsSent struct {
	version, ca, nat, pool string
	revoked                int
}

func newFactReporter(version string, sign func(string) ([]byte, error),
	post func(context.Context, control.FactsRequest, int) error, log *slog.Logger) *factReporter {
	return &factReporter{want: factsSent{version: version}, sign: sign, post: post, jitter: factJitter, retryMin: factRetryMin,
		wake: make(chan struct{}, 1), log: log}
}

// offer is what this node runs now (control.CAReport): a post follows if
// it differs from what was sent.
func (f *factReporter) offer(ca string) { f.change(func(w *factsSent) { w.ca = ca }) }

// change applies set to what runs now; a post follows if that differs
// from what was sent.
func (f *factReporter) change(set func(*factsSent)) {
	if f == nil { // a runtime built without one (tests)
		return
	}
	f.mu.Lock()
	set(&f.want)
	due := f.sent != f.want
	f.mu.Unlock()
	if due {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// run posts each change until ctx ends.
func (f *factReporter) run(ctx context.Context) {
	wait, skip := f.retryMin, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
		if !sleepCtx(ctx, randUpTo(f.jitter)) {
			return
		}
		for !f.settled() {
			if err := f.postOnce(ctx, skip); err != nil {
				f.log.Debug("facts not reported; trying again", "code", codes.OrInternal(err), "err", err, "in", wait)
				skip++
				if !sleepCtx(ctx, wait/2+randUpTo(wait)) {
					return
				}
				wait = min(2*wait, factRetryMax)
				continue
			}
			wait = f.retryMin
		}
	}
}

// settled reports whether what runs is what a control node took.
func (f *factReporter) settled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent == f.want
}

// postOnce posts what runs now.
func (f *factReporter) postOnce(ctx context.Context, skip int) error {
	f.mu.Lock()
	want := f.want
	f.mu.Unlock()
	req := control.FactsRequest{Version: want.version, NAT: want.nat, Pool: want.pool, Revoked: want.revoked}
	if want.ca != "" {
		sig, err := f.sign(want.ca)
		if err != nil {
			return err
		}
		req.CA, req.CASig = want.ca, sig
	}
	pctx, cancel := context.WithTimeout(ctx, factPostBound)
	defer cancel()
	err := f.post(pctx, req, skip)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.posts++
	if err == nil {
		f.sent = want
	}
	return err
}

// randUpTo is a random duration in [0, d).
func randUpTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// signCA is this node's signature of CA report ca, as its gossip tag
// "cas" carries it (reportCA).
func (nd *node) signCA(ca string) ([]byte, error) {
	return nd.identity().Attest(pki.AttestCA, []byte(nd.facts.NodeID), control.CAStatement(ca))
}

// postFacts sends req: on a control node into its own plane's batch; on
// a worker to a control node, the seeds turned by skip (a failed post
// tries the next one first), as the tunnel reports do.
func (nd *node) postFacts(ctx context.Context, req control.FactsRequest, skip int) error {
	if nd.removed() { // its cluster refuses it: its one ask a minute is the removal's (standing.go)
		return nd.standing.Err()
	}
	if nd.ctl != nil {
		return nd.ctl.ReportOwnFacts(ctx, req)
	}
	seeds := nd.seeds()
	if len(seeds) > 0 {
		seeds = slices.Concat(seeds[skip%len(seeds):], seeds[:skip%len(seeds)])
	}
	return nd.client.PostSeeds(ctx, seeds, control.PathSelfFacts, req, nil)
}
