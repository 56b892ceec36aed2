package member

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// meshConfig is the Nebula config this node should run now: its identity,
// the control nodes as lighthouses, every other live node in the static
// host map, and the revoked certificates blocked.
func (ov *overlay) meshConfig() mesh.Config { return ov.meshConfigFor(ov.overlayInputs()) }

// meshConfigFor is meshConfig from inputs already read.
func (ov *overlay) meshConfigFor(in desired.Inputs) mesh.Config {
	return ov.meshConfigCut(in, ov.removed())
}

// meshConfigCut is meshConfigFor with the node's standing read: cut off
// when the cluster no longer knows it (standing.go).
func (ov *overlay) meshConfigCut(in desired.Inputs, cut bool) mesh.Config {
	c := ov.restConfig()
	d := desired.Compute(in)
	c.Lighthouses, c.StaticHosts, c.Blocklist, c.Relays, c.Roaming = d.Lighthouses, d.StaticHosts, d.Blocklist, d.Relays, d.Roaming
	r := desired.Routes(in, d)
	c.UnsafeRoutes = r.Unsafe
	if r.ExitChosen && !c.Userspace {
		c.SoMark = exitMark // the exit routing sends what carries it to the main table (subnets.go)
	}
	if cut {
		return cutOff(c) // the cluster no longer knows this node (standing.go)
	}
	return c
}

// restConfig is the part of the config that no membership change
// touches: meshd.yaml and the facts, the firewall and MTU in force, the
// identity. meshConfigCut adds the peers and routes.
func (ov *overlay) restConfig() mesh.Config {
	c := ov.meshBase
	ov.policy().Apply(&c)
	id := ov.identity()
	c.CACert, c.Cert, c.Key = id.NebulaCACert, id.NebulaCert, id.NebulaKey
	return c
}

// startMesh starts Nebula with the config the node knows at start. A
// refused setting is named by its meshd.yaml key and why.
// In userspace mode it takes over the overlay an earlier runtime of this
// process parked (see Parked).
func (ov *overlay) startMesh() error {
	c := ov.meshConfig()
	if ov.parked != nil {
		m, err := ov.parked.take(c)
		if err != nil {
			return err
		}
		if m != nil {
			ov.mesh, ov.meshApplied = m, c
			return nil
		}
	}
	m, err := mesh.Start(c, ov.log)
	if err != nil {
		// A setting Nebula refused (a UDP port taken, a TUN device it
		// cannot create) is named by its meshd.yaml key (issue 52).
		return ov.cfg.NameMeshSetting("start overlay", err)
	}
	ov.mesh, ov.meshApplied = m, c
	return nil
}

// applied is the Nebula config last applied. Its static host map is the
// overlay loop's, which changes it in place (overlaydelta.go): another
// goroutine reads the map only under appliedMu (staticPeerCount).
func (ov *overlay) applied() mesh.Config {
	ov.appliedMu.Lock()
	defer ov.appliedMu.Unlock()
	return ov.meshApplied
}

// reloadGap is the least time between two overlay reloads. A burst of
// joins brings one gossip event and one node-list change per joiner to
// every node; reloading Nebula for each (it re-reads the whole config, the
// CA bundle and every static host) cost a 50-join burst about 20 reloads
// per node. Changes that come within the gap wait for its end and are
// applied together; a change after a quiet spell is applied at once.
const reloadGap = 250 * time.Millisecond

// reloadShare bounds the time a node spends reloading Nebula during a
// burst of changes: the gap after a reload is at least reloadShare times
// what that reload took. A full reload costs about a millisecond per 20
// static hosts here (Nebula compares the old and new static host map by
// marshalling both), so at 1,000 nodes the gap grew from reloadGap to
// about half a second (BenchmarkKeyFleet, docs/performance.md). A
// membership change now takes Nebula patch 5's delta path (mesh.Reload:
// 0.12 ms at 1,000 static hosts, 0.86 ms at 10,000), so the gap stays at
// reloadGap unless a reload takes 25 ms or more: a full one, for a change
// the delta path does not cover.
const reloadShare = 10

// reloadGapMost caps the gap: a reload slowed by a starved CPU (one 50-join
// burst on this 2-core box) must not hold the next change, a removal's
// among them, for ten times as long.
const reloadGapMost = time.Second

// nextGap is the least time after a reload that took took before the
// next: reloadGap, or reloadShare times took when that is longer, at most
// reloadGapMost.
func nextGap(took time.Duration) time.Duration {
	return min(reloadGapMost, max(reloadGap, reloadShare*took))
}

// gapLeft is how long until the gap after the last reload ends (0 once
// it has).
func (ov *overlay) gapLeft() time.Duration { return max(0, ov.gap-time.Since(ov.lastReload)) }

// reconcileOverlay brings Nebula in line with raft and gossip, from the
// facts this node holds now, read into in (it never waits for a fetch). A
// change within the gap after the last reload (nextGap) is held back: it
// returns how long to wait before trying again, or 0.
func (ov *overlay) reconcileOverlay(in desired.Inputs) time.Duration {
	if wait := ov.gapLeft(); wait > 0 {
		return wait
	}
	if ov.applyMemberChange(in) { // a membership change alone: Mesh.Apply (overlaydelta.go)
		return 0
	}
	cut := ov.removed()
	want := ov.meshConfigCut(in, cut)
	if reflect.DeepEqual(want, ov.applied()) {
		ov.track(in, cut)
		ov.applyRouting(in, want)
		return 0
	}
	start := time.Now()
	err := ov.mesh.Reload(want)
	ov.lastReload, ov.gap = start, nextGap(time.Since(start))
	if err != nil {
		ov.tracking = false
		ov.overlayErr.Store(errBox{err})
		ov.log.Warn("overlay reload refused; the running overlay is unchanged", "code", codes.OrInternal(err), "err", err)
		return 0
	}
	ov.overlayErr.Store(errBox{})
	ov.appliedMu.Lock()
	ov.meshApplied = want
	ov.appliedMu.Unlock()
	ov.track(in, cut)
	ov.pathWake.ring() // the relay list may have changed (pathwake.go)
	ov.applyRouting(in, want)
	ov.log.Debug("overlay reconciled", "lighthouses", len(want.Lighthouses), "static_hosts", len(want.StaticHosts),
		"took", time.Since(start), "next_gap", ov.gap)
	return 0
}

// controlGossip says how gossip shows each control node on record: what
// a join that saw none alive waited for.
func controlGossip(in desired.Inputs) string {
	var out []string
	for _, p := range desired.Peers(in) {
		if p.Role != pki.RoleControl {
			continue
		}
		st := string(p.Gossip)
		if st == "" {
			st = "not in gossip (or its tags disagree with its record)"
		}
		out = append(out, p.Name+": "+st)
	}
	if len(out) == 0 {
		return "no control node on record"
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// poke asks the overlay loop to reconcile now (a fact it reads changed).
func (nd *node) poke() {
	select {
	case nd.kick <- struct{}{}:
	default:
	}
}

// errBox lets an error (or none) live in an atomic.Value.
type errBox struct{ err error }

// confirmJoin is DESIGN §6 step 10: the node is alive in gossip alongside a
// control node (out of the pool: a control node is on record), and has
// reached a lighthouse over the overlay (any of those alive). A worker
// needs its node list first (raft's records decide which lighthouse
// counts); it says when it has one, and a join that times out says which
// of the two it waited for.
func (rt *Runtime) ConfirmJoin(ctx context.Context, step func(string, ...any)) error {
	start := time.Now()
	_, listed := rt.cluster.Records() // a control node reads raft's records itself
	var lighthouses []netip.Addr
	var listErr error
	for {
		_, listErr = rt.cluster.Refresh(ctx, false)
		in := rt.overlayInputs()
		if !listed && in.RecordsKnown {
			listed = true
			step("node list: %d other active nodes on record (%s)", len(in.Records), time.Since(start).Round(time.Millisecond))
		}
		if lighthouses = desired.AliveLighthouses(desired.Peers(in)); len(lighthouses) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			if !listed {
				return codes.Wrap(codes.GossipJoin, fmt.Errorf("no node list from a control node (last attempt: %v)", listErr))
			}
			return codes.Wrap(codes.GossipJoin, fmt.Errorf("no control node on record became alive in gossip (%s)", controlGossip(in)))
		case <-time.After(20 * time.Millisecond):
		}
	}
	if rt.gossip != nil {
		step("gossip: alive with %d members (%s)", len(rt.gossip.Members()), time.Since(start).Round(time.Millisecond))
	} else {
		step("out of the gossip pool: a control node alive on record (%s)", time.Since(start).Round(time.Millisecond))
	}
	rt.poke()
	lighthouse, err := waitAnyTunnel(ctx, lighthouses, rt.mesh.WaitTunnel) // confirmtunnel.go
	if err != nil {
		return err
	}
	step("overlay: tunnel to lighthouse %s established (%s)", lighthouse, time.Since(start).Round(time.Millisecond))
	return nil
}

// applyRouting brings the kernel in line with the routes of the config
// just applied (subnets.go): forwarding for the prefixes this node
// carries, the exit routing when it uses an exit node.
func (ov *overlay) applyRouting(in desired.Inputs, c mesh.Config) {
	r := desired.Routed{Unsafe: c.UnsafeRoutes}
	if c.SoMark != 0 {
		r = desired.Routes(in, desired.Compute(in))
	}
	ov.applyRoutes(in, r)
}

// applyRoutes is applyRouting with the routes computed.
func (ov *overlay) applyRoutes(in desired.Inputs, r desired.Routed) {
	own := in.SelfRoutes
	if ov.removed() {
		own = nil // cut off: it carries nothing (standing.go)
	}
	ov.subnets.apply(own, r, ov.log.Warn)
}
