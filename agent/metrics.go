package agent

import (
	"github.com/meshd/meshd/agent/metrics"
)

// metricsState is what the metrics collector reads at each scrape
// (metrics.State): this node's state, raft, gossip view and overlay.
func (a *Agent) metricsState() metrics.State {
	a.mu.Lock()
	ph, rt := a.phase, a.rt
	a.mu.Unlock()
	st := metrics.State{Phase: string(ph)}
	if rt == nil {
		return st
	}
	rt.FillMetrics(&st)
	return st
}
