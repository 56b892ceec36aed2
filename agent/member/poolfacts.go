package member

import (
	"context"
	"time"

	"github.com/meshd/meshd/agent/state"
)

// What a worker out of the gossip pool says by its facts instead of
// gossip (agent/control/poolfacts.go): that it is out of the pool (the
// others' gossip rejoin then does not dial it), its NAT (in the pool the
// tag tagNAT), and the revocation list version its Nebula blocks all of
// (in the pool its answer to a removal's gossip query, revocationack.go):
// the removal's round reads it from its record. Each goes through the
// fact reporter (factreport.go), which posts only what changed.

// poolFactsCheck is how often runPoolFacts looks though no overlay apply
// woke it: a safety net; a look that finds the list it offered costs one
// length comparison.
const poolFactsCheck = 30 * time.Second

// outOfPoolWorker reports whether this node is a worker out of the pool
// (no gossip, no control plane).
func (nd *node) outOfPoolWorker() bool { return nd.gossip == nil && nd.ctl == nil }

// runPoolFacts, on a worker out of the pool, offers the reporter the
// revocation list version its Nebula blocks all of, each time the overlay
// applied a config (pathWake rings) and every poolFactsCheck, until ctx
// ends. Its NAT is offered by runNATCheck (offerNAT).
func (rt *Runtime) runPoolFacts(ctx context.Context) {
	if !rt.outOfPoolWorker() {
		return
	}
	rt.factsOut.change(func(w *factsSent) { w.pool = state.PoolOut })
	timer := time.NewTimer(0)
	defer timer.Stop()
	offered := 0
	for {
		wake := rt.pathWake.wait()
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
		timer.Reset(poolFactsCheck)
		rev := rt.cluster.Revocations()
		if v := rev.Len(); v > offered && rt.ov.blocksAll(rev.Fingerprints) {
			offered = v
			rt.factsOut.change(func(w *factsSent) { w.revoked = v })
		}
	}
}

// offerNAT offers c, this node's NAT, to the reporter, on a worker out of
// the pool (in it the gossip tag says it).
func (rt *Runtime) offerNAT(c NAT) {
	if rt.outOfPoolWorker() && c != natUnknown {
		rt.factsOut.change(func(w *factsSent) { w.nat = string(c) })
	}
}
