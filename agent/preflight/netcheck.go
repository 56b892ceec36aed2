package preflight

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/netcheck"
)

// netcheckTimeout bounds a join's path check (its UDP exchange; the TCP
// dials that tell blocked UDP from seeds down add at most 2 s a seed).
const netcheckTimeout = 3 * time.Second

// Netcheck is a join's path check (issue 29 item 5): a STUN exchange
// from one UDP socket on underlay with each of the token's seeds, on the
// seed's host at ports.stun (the token names seeds by their control port;
// the STUN port is the cluster's, this config's ports.stun), and the
// seed's control port dialled when none answers over UDP. A Report whose
// Err is codes.OverlayUDPBlocked means the overlay cannot come up from
// here: a join stops before it spends the token. Nil when no seed
// resolves to an address (the seeds check fails then).
func (a Env) Netcheck(ctx context.Context, tok enroll.Token, underlay netip.Addr) (*netcheck.Report, error) {
	var targets []netcheck.Target
	for i, seed := range tok.Seeds {
		_, port, err := net.SplitHostPort(seed)
		if err != nil {
			continue
		}
		addrs := seedAddrs(ctx, tok.Seeds[i:i+1])
		if len(addrs) == 0 {
			continue
		}
		t := netcheck.Target{Name: seed, STUN: netip.AddrPortFrom(addrs[0], uint16(a.Config.Ports.STUN))}
		if ap, err := netip.ParseAddrPort(net.JoinHostPort(addrs[0].String(), port)); err == nil {
			t.TCP = ap
		}
		targets = append(targets, t)
	}
	if len(targets) == 0 {
		return nil, nil // no seed address resolves: the seeds check says so
	}
	o := netcheck.Options{Timeout: netcheckTimeout}
	if underlay.IsValid() && mesh.IsLocal(underlay) {
		o.Bind = underlay
	}
	return netcheck.Check(ctx, targets, o)
}

// PlanLines are a path check's lines as a plan's checks, each named
// "netcheck ...".
func PlanLines(rep *netcheck.Report) []apitype.PlanCheck {
	var out []apitype.PlanCheck
	for _, l := range rep.Lines() {
		out = append(out, apitype.PlanCheck{Name: "netcheck " + l.Name, Status: apitype.CheckStatus(l.Status), Code: l.Code, Detail: l.Detail})
	}
	return out
}

// netcheck is the plan's path check against the token's seeds; it runs
// only when a seed passed its checks (seed), so that the TCP port that
// tells blocked UDP from seeds down is a verified control node's.
func (p *planner) netcheck(ctx context.Context, tok enroll.Token, underlay netip.Addr, seed string) {
	if seed == "" {
		p.skip("netcheck", "no seed passed its checks (reachable, pinned, clock)")
		return
	}
	rep, err := p.a.Netcheck(ctx, tok, underlay)
	if err != nil {
		p.fail("netcheck", err)
		return
	}
	if rep == nil {
		p.skip("netcheck", "no seed resolves to an address")
		return
	}
	for _, c := range PlanLines(rep) {
		p.add(c)
	}
}
