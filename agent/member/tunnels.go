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
// serves no 7300: its leaf is a client leaf): looked at when pathWake
// rings (a tunnel changed, or pair health's verdict on a member:
// pathwake.go), sent when either changed, at most once every
// control.TunnelReportEvery, and when control.TunnelReportMax passed since
// the last report that went through. It used to look every
// TunnelReportEvery whatever happened (issue 54).
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
	r := tunnelReporter{wait: control.TunnelReportEvery}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		wake := rt.pathWake.wait() // before the look: a change during it wakes the next
		if next := rt.tunnelReportLook(ctx, &r); !next.IsZero() {
			timer.Reset(max(0, time.Until(next)))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
	}
}

// tunnelReporter is what runTunnelReports remembers between looks.
type tunnelReporter struct {
	last        []apitype.Tunnel
	lastDown    []string
	sent, retry time.Time
	wait        time.Duration
	skip        int
}

// tunnelReportLook is one look: it sends a report if one is due and
// returns when the next look is due though nothing changes (zero: none).
func (rt *Runtime) tunnelReportLook(ctx context.Context, r *tunnelReporter) time.Time {
	if rt.removed() { // removed: nothing to report (standing.go)
		return time.Time{}
	}
	at := time.Now()
	if at.Before(r.retry) {
		return r.retry
	}
	now, down := rt.ov.tunnels(), rt.pairs.unreachable()
	if !r.sent.IsZero() {
		if slices.Equal(now, r.last) && slices.Equal(down, r.lastDown) && at.Sub(r.sent) < control.TunnelReportMax {
			return r.sent.Add(control.TunnelReportMax)
		}
		if gap := r.sent.Add(control.TunnelReportEvery); at.Before(gap) {
			return gap // changed within the gap: sent at its end, with what is then
		}
	}
	cctx, cancel := context.WithTimeout(ctx, control.TunnelReportEvery)
	defer cancel()
	req, seeds := control.TunnelsRequest{Tunnels: now, Unreachable: down}, rt.seeds()
	if len(seeds) > 0 {
		seeds = slices.Concat(seeds[r.skip%len(seeds):], seeds[:r.skip%len(seeds)])
	}
	err := rt.client.PostSeeds(cctx, seeds, control.PathSelfTunnels, req, nil)
	if codes.Of(err) == codes.BadRequest && len(down) > 0 {
		req.Unreachable = nil
		err = rt.client.PostSeeds(cctx, seeds, control.PathSelfTunnels, req, nil)
	}
	if err != nil {
		rt.log.Debug("tunnel report not sent", "err", err, "retry_in", r.wait)
		r.retry, r.wait, r.skip = time.Now().Add(r.wait), min(2*r.wait, control.TunnelReportMax), r.skip+1
		return r.retry
	}
	r.last, r.lastDown, r.sent, r.retry, r.wait = now, down, time.Now(), time.Time{}, control.TunnelReportEvery
	return r.sent.Add(control.TunnelReportMax)
}
