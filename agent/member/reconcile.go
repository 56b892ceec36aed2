package member

import (
	"context"
	"time"

	"github.com/meshd/meshd/gossip"
)

// A runtime keeps its overlay in line with the cluster in two loops:
//
//   - the overlay loop (runReconcile) reconciles Nebula with the facts
//     the node holds now, at once on every gossip event, poke and tick;
//     it never waits for a fetch;
//   - the follow loop (runFollow) brings the facts in, one named step at
//     a time, each within its own budget (a worker's fetches from the
//     control nodes, a control node's own duties), and pokes the overlay
//     loop as soon as a step changed what it computes from.
//
// So a slow or silent control node delays only the facts it would
// serve, never an overlay change that gossip alone decides (a member
// failed, or came back): e2e.TestOverlayFollowsGossipWhileControlStalls.

// followStep is one named step of the follow loop. run reports whether
// it changed what the overlay is computed from and the overlay loop was
// not told otherwise: a step whose change pokes the overlay itself (a CA
// bundle, a certificate adopted) or reaches it through raft's own pokes
// (a control node's duties) reports false.
type followStep struct {
	name   string
	budget time.Duration
	run    func(ctx context.Context, t told) bool
}

// told is which gossip notifications a follow pass answers: each makes
// its step fetch at once instead of when due.
type told struct{ revoked, keys, ca bool }

func (t told) or(u told) told { return told{t.revoked || u.revoked, t.keys || u.keys, t.ca || u.ca} }

// stepBudget bounds one follow step: a fetch asks the control nodes in
// turn within it (control.Client.AskSeeds).
const stepBudget = 5 * time.Second

// followSteps are the steps every node runs, in order; a control node's
// own duties (controlDuties) come after the CA bundle.
func (rt *Runtime) followSteps(duties []followStep) []followStep {
	steps := []followStep{
		{"revocations and node list", stepBudget, func(ctx context.Context, t told) bool {
			changed, _ := rt.cluster.Refresh(ctx, t.revoked)
			return changed
		}},
		{"gossip keys", stepBudget, func(ctx context.Context, t told) bool { rt.keys.followKeys(ctx, t.keys); return false }},
		{"CA bundle", stepBudget, func(ctx context.Context, t told) bool { rt.ca.followCA(ctx, t.ca); return false }},
	}
	steps = append(steps, duties...)
	return append(steps, followStep{"renewed Nebula certificate", stepBudget, func(ctx context.Context, _ told) bool {
		rt.renew.adoptRenewedCert(ctx)
		return false
	}})
}

// controlDuties are a control node's own steps: follow the CA custody on
// record, renew the Nebula certificates that are due, finish a CA
// rotation that nothing depends on, revoke unused tokens naming a seed
// that left or was removed, rotate the gossip key when departed nodes are
// owed a rotation, prune old token records.
func (rt *Runtime) controlDuties() []followStep {
	return []followStep{
		// First: the steps after it wait on a leader, a removed node's in vain.
		{"standing", 15 * time.Second, func(ctx context.Context, _ told) bool { rt.followStanding(ctx); return false }}, // standing.go
		{"CA custody", 10 * time.Second, func(ctx context.Context, _ told) bool { rt.followCustody(ctx); return false }},
		{"Nebula renewals", 10 * time.Second, func(ctx context.Context, _ told) bool { rt.ctl.RenewNebulaCerts(ctx); return false }},
		{"CA rotation", 10 * time.Second, func(ctx context.Context, _ told) bool { rt.ca.finishCARotation(ctx); return false }},
		{"tokens naming departed seeds", stepBudget, func(ctx context.Context, _ told) bool { rt.ctl.SweepSeedTokens(ctx); return false }}, // the leader only
		{"gossip key owed", stepBudget, func(context.Context, told) bool { rt.ctl.PayKeys(); return false }},                               // the leader only, in the background
		{"token pruning", stepBudget, func(ctx context.Context, _ told) bool { _, _ = rt.ctl.PruneTokens(ctx); return false }},             // the leader only; it logs its own failure
	}
}

// wake asks both loops for a pass now: raft changed something this node
// follows (the control plane's Hooks.Poke).
func (nd *node) wake() {
	nd.poke()
	nd.wakeFollow(told{})
}

// wakeFollow asks the follow loop for a pass answering t.
func (nd *node) wakeFollow(t told) {
	nd.followMu.Lock()
	nd.followTold = nd.followTold.or(t)
	nd.followMu.Unlock()
	select {
	case nd.followKick <- struct{}{}:
	default:
	}
}

// runFollow runs the follow steps when woken and every interval (the
// safety net), each within its budget, poking the overlay loop at once
// after a step that changed what it computes from.
func (rt *Runtime) runFollow(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rt.followKick:
		case <-tick.C:
		}
		rt.followMu.Lock()
		t := rt.followTold
		rt.followTold = told{}
		rt.followMu.Unlock()
		for _, s := range rt.steps {
			sctx, cancel := context.WithTimeout(ctx, s.budget)
			start := time.Now()
			changed := s.run(sctx, t)
			cancel()
			if took := time.Since(start); took >= s.budget {
				rt.log.Debug("follow step ran out of its budget", "step", s.name, "budget", s.budget)
			}
			if ctx.Err() != nil {
				return
			}
			if changed {
				rt.poke() // at once: a later step may take its whole budget
			}
		}
	}
}

// runReconcile is the overlay loop: it reconciles at once on every gossip
// event (and passes the event on to the follow loop), on every poke, and
// every interval. A reconcile held back by the reload gap (nextGap) is
// retried when the gap ends, and until then events and pokes only wait
// for it: a burst of raft changes (a fleet joining) costs one pass per
// gap, not one per change, each reading every record and name.
func (rt *Runtime) runReconcile(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	held := false // a pass is due when retry fires
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-rt.gossipEvents(): // nil out of the pool (outofpool.go)
			if !ok {
				return
			}
			user := ev.Kind == gossip.EventUser
			rt.wakeFollow(told{revoked: user && ev.Name == notifyRevoked, keys: user && ev.Name == notifyKeys,
				ca: user && ev.Name == notifyCA})
			rt.log.Debug("gossip event", "kind", ev.Kind, "members", len(ev.Members), "name", ev.Name)
		case <-rt.kick:
		case <-retry.C:
			held = false
		case <-tick.C:
		}
		if held {
			continue
		}
		if wait := rt.ov.gapLeft(); wait > 0 {
			retry.Reset(wait)
			held = true
			continue
		}
		rt.dns.syncZone()                       // names.go: before the reload a removal's acknowledgement waits for
		if wait := rt.overlayPass(); wait > 0 { // overlaypass.go
			retry.Reset(wait)
			held = true
		}
	}
}
