package agent

import (
	"context"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/preflight"
)

// planTimeout bounds a whole plan: a seed that drops packets costs its
// dial timeout (5 s) per seed.
const planTimeout = 60 * time.Second

// Plan runs every preflight check of a join with req (`meshctl join
// --plan`, preflight.Run) and hands each to emit as it finishes. It
// writes nothing. The result is OK only if a real join would pass every
// check; an error means the plan could not run at all (another init,
// join or leave runs, or meshd is starting).
func (j joiner) Plan(ctx context.Context, req apitype.JoinRequest, emit func(apitype.PlanCheck)) (*apitype.PlanResult, error) {
	done, err := j.a.beginOp()
	if err != nil {
		return nil, err
	}
	defer done()
	if err := j.a.serving(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, planTimeout)
	defer cancel()
	res := preflight.Run(ctx, j.a.preflight(), req, j.a.currentPhase() == phaseRunning, emit)
	if f := res.Failed(); f != nil {
		j.a.log.Info("join plan: a join would fail", "code", f.Code, "check", f.Name)
	} else {
		j.a.log.Info("join plan: a join would pass every check")
	}
	return res, nil
}

// preflight is what a join and its plan share (preflight.Env).
func (a *Agent) preflight() preflight.Env {
	return preflight.Env{Config: a.cfg, Now: a.d.Now, Log: a.log, OverlayParked: a.parked.Holds(), Sessions: a.seeds}
}
