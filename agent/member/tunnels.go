package member

import (
	"context"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
)

// tunnels is this node's established Nebula tunnels, as the local and the
// internal API show them.
func (ov *overlay) tunnels() []apitype.Tunnel {
	out := []apitype.Tunnel{}
	if ov.mesh == nil {
		return out
	}
	for _, tn := range ov.mesh.Tunnels() {
		t := apitype.Tunnel{OverlayIP: tn.OverlayIP.String(), Name: tn.CertName, Relayed: tn.Relayed}
		if tn.Remote.IsValid() {
			t.Remote = tn.Remote.String() // a relayed tunnel has none
		}
		out = append(out, t)
	}
	return out
}

// handleTunnels answers GET /v0/tunnels: the cluster-wide tunnel view,
// on a control node only (a worker answers codes.NotControl: it holds
// no other node's tunnels; its own are in GET /v0/status).
// runTunnelReports is a worker's report of its tunnels to a control node
// (a worker serves no 7300: its leaf is a client leaf): looked at every
// control.TunnelReportEvery, sent when they changed or
// control.TunnelReportMax passed since the last report that went through.
// A refused or failed report is retried after a wait that doubles up to
// TunnelReportMax (a joining worker is refused until its join is
// confirmed; each refusal is logged on the control node).
func (rt *Runtime) runTunnelReports(ctx context.Context) {
	tick := time.NewTicker(control.TunnelReportEvery)
	defer tick.Stop()
	var last []apitype.Tunnel
	var sent, retry time.Time
	wait := control.TunnelReportEvery
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := rt.ov.tunnels()
		if time.Now().Before(retry) {
			continue
		}
		if !sent.IsZero() && slices.Equal(now, last) && time.Since(sent) < control.TunnelReportMax {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, control.TunnelReportEvery)
		err := rt.client.PostSeeds(cctx, rt.seeds(), control.PathSelfTunnels, control.TunnelsRequest{Tunnels: now}, nil)
		cancel()
		if err != nil {
			rt.log.Debug("tunnel report not sent", "err", err, "retry_in", wait)
			retry, wait = time.Now().Add(wait), min(2*wait, control.TunnelReportMax)
			continue
		}
		last, sent, retry, wait = now, time.Now(), time.Time{}, control.TunnelReportEvery
	}
}
