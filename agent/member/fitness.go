package member

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/fitness"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// fitCheck is this node's fitness to serve (package fitness): its state
// dir's write check on every node, and on a control node its clock
// against the other control nodes'. An unfit control node answers joins
// codes.SeedUnfit, mints nothing while its clock is untrusted, and hands
// raft leadership to another voter.
type fitCheck struct {
	disk   *fitness.Disk
	clocks *fitness.Clocks // nil on a worker
	every  time.Duration
	// handedOff is when this node last gave up leadership for being
	// unfit: at most once per handOffEvery, so two unfit voters do not
	// pass it back and forth.
	handedOff time.Time
}

// handOffEvery bounds how often an unfit leader hands leadership off.
const handOffEvery = 30 * time.Second

// peerClockTimeout bounds one clock question to a control node.
const peerClockTimeout = 2 * time.Second

// workerFitnessEvery is how often a worker checks its state dir with
// `timers: lan`: it serves no joins, so the verdict only feeds its status
// and metrics, and a page written and synced every 5 s was the largest
// source of an idle worker's system calls (issue 54). Fast timers keep
// FitnessEvery's pace.
const workerFitnessEvery = 30 * time.Second

func newFitCheck(nd *node) *fitCheck {
	f := &fitCheck{disk: fitness.NewDisk(nd.stateDir), every: nd.cfg.FitnessEvery()}
	if nd.facts.Role == pki.RoleControl {
		f.clocks = fitness.NewClocks(nd.cfg.MaxClockSkew)
	} else if nd.cfg.Timers != config.TimersFast {
		f.every = max(f.every, workerFitnessEvery)
	}
	return f
}

// unfit is why this node cannot serve joins now, nil when it can
// (enroll.Deps.Unfit).
func (rt *Runtime) unfit() error {
	if err := rt.fit.disk.Err(); err != nil {
		return err
	}
	if rt.fit.clocks != nil {
		return rt.fit.clocks.Verdict().Untrusted()
	}
	return nil
}

// clockHook is control.Hooks.Clock.
func (rt *Runtime) clockHook() (time.Duration, error) {
	if rt.fit.clocks == nil {
		return 0, nil
	}
	v := rt.fit.clocks.Verdict()
	return v.Deviation, v.Untrusted()
}

// runFitness checks the disk (and the clocks, on a control node) every
// fit.every until ctx ends, logging each change of verdict.
func (rt *Runtime) runFitness(ctx context.Context) {
	t := time.NewTicker(rt.fit.every)
	defer t.Stop()
	var was error
	for {
		rt.checkFitness(ctx)
		now := rt.unfit()
		switch {
		case now != nil && (was == nil || codes.Of(now) != codes.Of(was)):
			rt.log.Warn("this node is not fit to serve joins; it steps aside until this clears", "code", codes.OrInternal(now), "err", now)
		case now == nil && was != nil:
			rt.log.Info("this node is fit to serve again", "was", codes.OrInternal(was))
		}
		was = now
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkFitness runs one round: the write check, the clocks, and an
// unfit leader's hand-off.
func (rt *Runtime) checkFitness(ctx context.Context) {
	_ = rt.fit.disk.Check()
	if rt.ctl == nil {
		return
	}
	rt.measureClocks(ctx)
	why := rt.unfit()
	if why == nil || !rt.ctl.Raft().IsLeader() || time.Since(rt.fit.handedOff) < handOffEvery {
		return
	}
	rt.fit.handedOff = time.Now()
	rt.log.Warn("handing raft leadership to another voter: this node is not fit to lead", "code", codes.OrInternal(why), "err", why)
	if err := rt.ctl.Raft().HandOff(); err != nil {
		rt.log.Warn("leadership hand-off failed", "err", err)
	}
}

// measureClocks asks every other active control node for its clock.
func (rt *Runtime) measureClocks(ctx context.Context) {
	var peers []string
	for _, n := range rt.ctl.Raft().FSM().Nodes() {
		if n.Role != pki.RoleControl || n.State != state.NodeActive || n.ID == rt.facts.NodeID || n.EnrollAddr == "" {
			continue
		}
		peers = append(peers, n.Name)
		cctx, cancel := context.WithTimeout(ctx, peerClockTimeout)
		off, err := rt.client.PeerClock(cctx, n.EnrollAddr, rt.now)
		cancel()
		if err != nil {
			rt.log.Debug("could not read a control node's clock", "node", n.Name, "err", err)
			continue
		}
		rt.fit.clocks.Observe(n.Name, off)
	}
	rt.fit.clocks.Keep(peers)
}

// fitnessWarnings are status's warnings about this node's disk and
// clock.
func (rt *Runtime) fitnessWarnings() []apitype.Warning {
	var out []apitype.Warning
	if err := rt.fit.disk.Err(); err != nil {
		out = append(out, apitype.Warning{Code: codes.OrInternal(err), Detail: err.Error()})
	}
	if rt.fit.clocks == nil {
		return out
	}
	v := rt.fit.clocks.Verdict()
	if err := v.Untrusted(); err != nil {
		out = append(out, apitype.Warning{Code: codes.ClockUntrusted, Detail: err.Error()})
	} else if d := v.Deviation.Abs(); d > min(enroll.WarnSkew, v.Max) {
		out = append(out, apitype.Warning{Code: codes.ClockSkewWarning,
			Detail: fmt.Sprintf("this control node's clock is %s from the median of the control nodes' clocks", d.Round(time.Millisecond))})
	}
	var peers []string
	for _, p := range v.Skewed {
		if p != "" {
			peers = append(peers, fmt.Sprintf("%s (%s from this clock)", p, v.Offsets[p].Round(time.Millisecond)))
		}
	}
	if len(peers) > 0 && !slices.Contains(v.Skewed, "") {
		out = append(out, apitype.Warning{Code: codes.ClockPeerSkewed,
			Detail: "clock off from the median of the control nodes': " + strings.Join(peers, ", ")})
	}
	return out
}
