package control

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/codes"
)

// The calls every worker makes on its own, bounded per second on each
// control node (issue 32: spread the periodic work): at 1,000 workers a
// burst of joins changes every worker's tunnels at once, and each one's
// report would land within the same two seconds. Past a bound a call is
// answered codes.ControlBusy at once: a worker's tunnel report is sent
// again after its retry wait, starting at the next control node
// (member/tunnels.go), and a read asks the next control node
// (Client.AskSeeds), so the calls spread over the control nodes and over
// time instead of queueing on one.
//
// Each call has three bounds, checked in this order (issue 52 item 11:
// one shared budget let one worker spend it for all): its caller's own
// (the node id of the mTLS leaf the guard passed), its source network's
// (an IPv4 /24 or IPv6 /64, as the raft port's handshake slots count:
// raftnode.SourceNet; a caller's other identities from the same network
// share it), and the control node's shared bound, the last line. A call
// refused by one bound spends nothing of the others, so a flooding
// caller spends only its own budget and its network's share.
const (
	// TunnelReportsPerSecond: at 1,000 workers reporting every 2 s at
	// worst, 500 a second spread over 3 control nodes.
	TunnelReportsPerSecond = 250
	// NodeListsPerSecond bounds GET /v1/nodes (a worker's `meshctl
	// nodes`, and the strict list a worker of an earlier release polls):
	// each is the whole list, about 400 KB at 1,000 nodes.
	NodeListsPerSecond = 50
	// StrictChangesPerSecond bounds GET /v1/watch?strict=1, one change
	// after a read index: what every worker asks at once when told of a
	// change its stream has not brought (agent/fetched), so a third of
	// 1,000 workers lands on each of 3 control nodes within a second.
	StrictChangesPerSecond = 500
)

// gateLimits are one call's bounds, in calls a second; each bound's
// burst is one second's worth, a caller's its own.
type gateLimits struct {
	Shared      int // the control node's, for every caller together
	PerNet      int // one source network's
	PerCaller   int // one caller's
	CallerBurst int // what one caller may send at once
}

// The bounds of each gated call. A worker reports its tunnels at most
// every 2 s (control.TunnelReportEvery, and once more at once to an
// older control node); it reads the node list or a strict change at
// most once a second, at once when told of a change, and every 200 ms
// after a failure (fetched.nodeListRetry). One network may take half of
// the shared bound: a site of workers behind one NAT shares it.
func reportLimits() gateLimits {
	return gateLimits{Shared: TunnelReportsPerSecond, PerNet: TunnelReportsPerSecond / 2, PerCaller: 1, CallerBurst: 3}
}

func listLimits() gateLimits {
	return gateLimits{Shared: NodeListsPerSecond, PerNet: NodeListsPerSecond / 2, PerCaller: 2, CallerBurst: 5}
}

func strictLimits() gateLimits {
	return gateLimits{Shared: StrictChangesPerSecond, PerNet: StrictChangesPerSecond / 2, PerCaller: 5, CallerBurst: 10}
}

// gateTableMax bounds how many callers, and how many networks, one gate
// tracks. A caller idle long enough for its budget to refill is dropped
// at the next call (limiterTable), so the table holds the callers of the
// last few seconds; past gateTableMax the least recently seen one goes
// (it comes back with a full budget, which it would nearly have had).
// About 220 bytes an entry (TestGateTableBounded): at most about 1 MB for
// a gate's callers, whatever the number of workers.
const gateTableMax = 4096

// gate bounds one call (what names it in refusals).
type gate struct {
	what string
	lim  gateLimits
	now  func() time.Time
	log  *slog.Logger

	mu      sync.Mutex
	shared  *rate.Limiter
	callers *limiterTable[string]
	nets    *limiterTable[netip.Prefix]
}

// newGate is a gate within lim; now is its clock (nil: time.Now).
func newGate(what string, lim gateLimits, now func() time.Time, log *slog.Logger) *gate {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &gate{what: what, lim: lim, now: now, log: log,
		shared:  rate.NewLimiter(rate.Limit(lim.Shared), lim.Shared),
		callers: newLimiterTable[string](rate.Limit(lim.PerCaller), lim.CallerBurst, gateTableMax),
		nets:    newLimiterTable[netip.Prefix](rate.Limit(lim.PerNet), lim.PerNet, gateTableMax)}
}

// passRequest is pass for r's caller c, from r's source address.
func (g *gate) passRequest(r *http.Request, c Caller) error {
	return g.pass(c, remoteAddr(r))
}

// pass is nil, or codes.ControlBusy when c (calling from src) has spent
// its own budget, its network's, or the control node's. The first
// refusal of a caller's own budget, in each run of calls that keeps it
// tracked, is logged with its code: who floods is named once, not at
// every call.
func (g *gate) pass(c Caller, src netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	ce := g.callers.get(c.NodeID, now)
	ne := g.nets.get(raftnode.SourceNet(src), now)
	var err error
	switch {
	case ce.l.TokensAt(now) < 1:
		err = fmt.Errorf("%s: at most %d a second from one caller (node %s) on this control node", g.what, g.lim.PerCaller, c.NodeID)
		if !ce.logged {
			ce.logged = true
			g.log.Info("a caller spent its own bound; its calls are refused until it slows down", "code", codes.ControlBusy,
				"what", g.what, "node", c.Name, "node_id", c.NodeID, "source", src, "per_second", g.lim.PerCaller)
		}
	case ne.l.TokensAt(now) < 1:
		err = fmt.Errorf("%s: at most %d a second from one network (%s) on this control node", g.what, g.lim.PerNet, raftnode.SourceNet(src))
	case g.shared.TokensAt(now) < 1:
		err = fmt.Errorf("%s: at most %d a second on this control node", g.what, g.lim.Shared)
	default:
		ce.l.AllowN(now, 1)
		ne.l.AllowN(now, 1)
		g.shared.AllowN(now, 1)
		return nil
	}
	return codes.Wrap(codes.ControlBusy, err)
}

// remoteAddr is the request's source address, IPv4 unmapped (invalid
// when it is not an address: all such callers share one network).
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
