package agent

import (
	"context"

	"github.com/meshd/meshd/agent/metrics"
	"github.com/meshd/meshd/codes"
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
	st.Running = true
	st.TLSExpires = rt.live.Leaf().NotAfter
	if rt.ctl != nil {
		st.Control = true
		r := rt.ctl.Raft()
		st.Nodes = map[[2]string]int{}
		for _, n := range r.FSM().Nodes() {
			st.Nodes[[2]string{string(n.Role), string(n.State)}]++
		}
		st.Leader, st.Voters = r.IsLeader(), r.Voters()
		p := r.Progress()
		st.Commit, st.Applied = r.CommitIndex(), p.AppliedIndex
		st.LastContact, st.HeardLeader = p.LastContact, p.LastContact >= 0
	}
	if rt.gossip != nil {
		st.GossipKnown, st.Gossip = true, map[string]int{}
		for _, g := range rt.gossipView() { // desired.View: what status and nodes show
			st.Gossip[string(g)]++
		}
		st.KeyErrors = uint64(rt.gossip.KeyErrors())
	}
	if o := rt.overlayStatus(); o != nil {
		st.OverlayKnown, st.Tunnels, st.Blocklist, st.NebulaExpires = true, len(o.Tunnels), o.Blocklist, o.CertExpires
	}
	return st
}

// startOverlayMetrics serves metrics on the node's overlay address, when
// metrics_addr names it, until ctx ends (metrics.ListenFreebind: it does
// not depend on the moment Nebula gives the TUN device its address).
func (a *Agent) startOverlayMetrics(ctx context.Context, rt *runtime) {
	ap, loopback, ok := a.cfg.MetricsListen()
	if !ok || loopback {
		return
	}
	if err := a.cfg.CheckMetricsOverlay(rt.overlayAddr()); err != nil {
		a.log.Error("metrics are not served", "code", codes.OrInternal(err), "err", err)
		return
	}
	ln, err := metrics.ListenFreebind(ctx, ap)
	if err != nil {
		a.log.Error("metrics are not served", "code", codes.MetricsAddrRefused, "addr", ap, "err", err)
		return
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := a.met.Serve(ctx, ln); err != nil {
			a.log.Warn("metrics listener", "err", err)
		}
	}()
}
