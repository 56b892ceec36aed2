package member

import (
	"context"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
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
// runTunnelReports is a worker's report of its tunnels, and of the
// members it cannot reach (pairhealth.go), to a control node (a worker
// serves no 7300: its leaf is a client leaf): looked at every
// control.TunnelReportEvery, sent when either changed or
// control.TunnelReportMax passed since the last report that went through.
// A control node of an older release refuses a report that names
// unreachable members (it decodes strictly: BadRequest); the tunnels
// alone are sent to it again.
// A refused or failed report is retried after a wait that doubles up to
// TunnelReportMax (a joining worker is refused until its join is
// confirmed; each refusal is logged on the control node), starting at the
// next control node: the first one, silent to this worker (a one-way
// cut), would otherwise take the whole budget of every attempt, and the
// break it is to report would never be reported.
func (rt *Runtime) runTunnelReports(ctx context.Context) {
	tick := time.NewTicker(control.TunnelReportEvery)
	defer tick.Stop()
	var last []apitype.Tunnel
	var lastDown []string
	var sent, retry time.Time
	wait, skip := control.TunnelReportEvery, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, down := rt.ov.tunnels(), rt.pairs.unreachable()
		if time.Now().Before(retry) || rt.removed() { // removed: nothing to report (standing.go)
			continue
		}
		if !sent.IsZero() && slices.Equal(now, last) && slices.Equal(down, lastDown) && time.Since(sent) < control.TunnelReportMax {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, control.TunnelReportEvery)
		req, seeds := control.TunnelsRequest{Tunnels: now, Unreachable: down}, rt.seeds()
		if len(seeds) > 0 {
			seeds = slices.Concat(seeds[skip%len(seeds):], seeds[:skip%len(seeds)])
		}
		err := rt.client.PostSeeds(cctx, seeds, control.PathSelfTunnels, req, nil)
		if codes.Of(err) == codes.BadRequest && len(down) > 0 {
			req.Unreachable = nil
			err = rt.client.PostSeeds(cctx, seeds, control.PathSelfTunnels, req, nil)
		}
		cancel()
		if err != nil {
			rt.log.Debug("tunnel report not sent", "err", err, "retry_in", wait)
			retry, wait, skip = time.Now().Add(wait), min(2*wait, control.TunnelReportMax), skip+1
			continue
		}
		last, lastDown, sent, retry, wait = now, down, time.Now(), time.Time{}, control.TunnelReportEvery
	}
}
