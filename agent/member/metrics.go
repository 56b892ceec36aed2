package member

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/metrics"
	"github.com/meshd/meshd/codes"
)

// startOverlayMetrics serves metrics on the node's overlay address, when
// metrics_addr names it, until ctx ends (metrics.ListenFreebind: it does
// not depend on the moment Nebula gives the TUN device its address).
func (rt *Runtime) startOverlayMetrics(ctx context.Context) {
	ap, loopback, ok := rt.cfg.MetricsListen()
	if !ok || loopback {
		return
	}
	if err := rt.cfg.CheckMetricsOverlay(rt.overlayAddr()); err != nil {
		rt.log.Error("metrics are not served", "code", codes.OrInternal(err), "err", err)
		return
	}
	ln, err := metrics.ListenFreebind(ctx, ap)
	if err != nil {
		rt.log.Error("metrics are not served", "code", codes.MetricsAddrRefused, "addr", ap, "err", err)
		return
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := rt.met.Serve(ctx, ln); err != nil {
			rt.log.Warn("metrics listener", "err", err)
		}
	}()
}

// FillMetrics fills st with what this member runs (metrics.State): raft,
// the gossip view, the overlay, the certificates' expiry.
func (rt *Runtime) FillMetrics(st *metrics.State) {
	st.Running = true
	st.TLSExpires = rt.live.Leaf().NotAfter
	st.DiskFailing, st.DiskFailures = rt.fit.disk.Err() != nil, rt.fit.disk.Failures()
	if rt.fit.clocks != nil {
		v := rt.fit.clocks.Verdict()
		st.ClockKnown, st.ClockDeviates, st.ClockUntrust = len(v.Offsets) > 0, v.Deviation, v.Untrusted() != nil
	}
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
		st.EphemeralReaped = rt.ctl.EphemeralReaped()
	}
	if rt.gossip != nil {
		st.GossipKnown, st.Gossip = true, map[string]int{}
		for _, g := range rt.members.gossipView() { // desired.View: what status and nodes show
			st.Gossip[string(g)]++
		}
		st.KeyErrors = uint64(rt.gossip.KeyErrors())
	}
	if o := rt.ov.overlayStatus(); o != nil {
		st.OverlayKnown, st.Tunnels, st.Blocklist, st.NebulaExpires = true, len(o.Tunnels), o.Blocklist, o.CertExpires
		st.Unreachable = len(rt.pairs.unreachable())
		st.Offloads = offloadGauges(o)
		for _, t := range o.Tunnels {
			if t.Relayed {
				st.Relayed++
			}
		}
		if rt.paths != nil {
			st.PathUpKnown = true
			st.PathUpDirect, st.PathUpFailed, st.PathUpSkipped = rt.paths.Counts()
		}
	}
	if rt.dns != nil {
		s := rt.dns.srv.Stats()
		st.DNS = &metrics.DNS{Queries: s.Queries, Limited: s.Limited, Malformed: s.Malformed, Rcodes: s.Rcodes,
			LatencyBounds: s.Latency.Bounds, LatencyCounts: s.Latency.Counts, LatencySum: s.Latency.Sum, LatencyCount: s.Latency.Count}
	}
}

// offloadGauges are meshd_overlay_offload's values: each offload asked
// for, in use or refused; nil when none was asked for.
func offloadGauges(o *apitype.Overlay) map[string]bool {
	if len(o.Offloads)+len(o.OffloadsRefused) == 0 {
		return nil
	}
	out := map[string]bool{}
	for _, n := range o.Offloads {
		out[n] = true
	}
	for _, n := range o.OffloadsRefused {
		out[n] = false
	}
	return out
}
