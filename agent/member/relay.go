package member

import (
	"context"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
)

// relayReportEvery and relayReportMax pace runRelayReport's attempts.
const (
	relayReportEvery = time.Second
	relayReportMax   = 30 * time.Second
)

// runRelayReport makes this node's record show its `relay:` setting: the
// join recorded the setting the node joined with; a node restarted with
// another one tells the cluster once it has its node list (POST
// control.PathSelfRelay over its own mTLS leaf: the control node records
// only the caller's own record). It returns once the record agrees, or
// when ctx ends; a refused or failed report is retried after a wait that
// doubles up to relayReportMax.
func (rt *Runtime) runRelayReport(ctx context.Context) {
	want, wait := rt.cfg.Relay, relayReportEvery
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		list, ok := rt.cluster.Records()
		if !ok || rt.removed() { // removed: nothing to record (standing.go)
			continue
		}
		for _, n := range list {
			if n.ID != rt.facts.NodeID {
				continue
			}
			if n.Relay == want {
				return
			}
			if !n.Active() {
				break // a joining node's confirmation comes first
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := rt.client.PostSeeds(cctx, rt.seeds(), control.PathSelfRelay, control.RelayRequest{Relay: want}, nil)
			cancel()
			if err != nil {
				rt.log.Warn("relay setting not recorded yet; retrying", "code", codes.OrInternal(err), "relay", want, "err", err, "retry_in", wait)
				wait = min(2*wait, relayReportMax)
				break
			}
			rt.log.Info("relay setting recorded", "relay", want)
			if _, err := rt.cluster.Refresh(ctx, true); err != nil {
				rt.log.Debug("node list not refreshed after the relay report", "err", err)
			}
			wait = relayReportEvery
		}
	}
}
