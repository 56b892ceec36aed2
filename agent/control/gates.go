package control

import (
	"fmt"

	"golang.org/x/time/rate"

	"github.com/meshd/meshd/codes"
)

// The calls every worker makes on its own, bounded per second on each
// control node (issue 32: spread the periodic work): at 1,000 workers a
// burst of joins changes every worker's tunnels at once, and each one's
// report would land within the same two seconds. Past the bound a call
// is answered codes.ControlBusy at once: a worker's tunnel report is
// sent again after its retry wait, starting at the next control node
// (member/tunnels.go), so the reports spread over the control nodes and
// over time instead of queueing on one.
const (
	// TunnelReportsPerSecond: at 1,000 workers reporting every 2 s at
	// worst, 500 a second spread over 3 control nodes.
	TunnelReportsPerSecond = 250
	// NodeListsPerSecond bounds GET /v1/nodes (a worker's `meshctl
	// nodes`, and the strict list a worker of an earlier release polls):
	// each is the whole list, about 400 KB at 1,000 nodes.
	NodeListsPerSecond = 50
)

// gate is one call's bound per second, with a burst of one second's
// worth.
type gate struct {
	what string
	l    *rate.Limiter
}

func newGate(what string, perSecond int) *gate {
	return &gate{what: what, l: rate.NewLimiter(rate.Limit(perSecond), perSecond)}
}

// pass is nil, or codes.ControlBusy when this second's calls are spent.
func (g *gate) pass() error {
	if g.l.Allow() {
		return nil
	}
	return codes.Wrap(codes.ControlBusy, fmt.Errorf("%s: at most %.0f a second on this control node", g.what, float64(g.l.Limit())))
}
