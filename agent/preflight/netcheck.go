package preflight

import (
	"cmp"
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
// the STUN port is the cluster's, this config's ports.stun), and, when
// none answers over UDP, each seed probed over pinned TLS (SeedProbe). A
// Report whose Err is codes.OverlayUDPBlocked means the overlay cannot
// come up from here: a join stops before it spends the token. Nil when
// no seed resolves to an address (the seeds check fails then).
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
	d := a.EnrollDeps(underlay, nil, nil)
	o := netcheck.Options{Timeout: netcheckTimeout, ProbeTCP: func(ctx context.Context, t netcheck.Target) netcheck.TCPProbe {
		pctx, cancel := context.WithTimeout(ctx, seedProbeTimeout)
		defer cancel()
		return SeedProbe(enroll.ProbeSeed(pctx, tok, t.Name, d), cmp.Or(d.MaxSkew, enroll.DefaultMaxSkew))
	}}
	if underlay.IsValid() && mesh.IsLocal(underlay) {
		o.Bind = underlay
	}
	return netcheck.Check(ctx, targets, o)
}

// seedProbeTimeout bounds one seed's probe (connect, TLS, its clock) in
// the path check.
const seedProbeTimeout = 5 * time.Second

// SeedProbe is what a seed's probe counts for in the path check, failing
// closed both ways. Its TCP answer counts only from a seed the join could
// use: one that proves itself a control node of the token's CA and whose
// clock (when it tells it) is within maxSkew; an impostor's or a removed
// control node's listener, or a seed whose clock is off, is the enroll
// step's to refuse, with its own code. And its silence over UDP counts
// only when it says which STUN port it serves: a seed of a release
// without the STUN responder says none, so no answer from it proves
// nothing (the check reads "not checked" and the join goes on).
func SeedProbe(r enroll.SeedReport, maxSkew time.Duration) netcheck.TCPProbe {
	if r.Err != nil {
		return netcheck.TCPProbe{}
	}
	if r.HasClock {
		if _, err := r.Skew.Judge(maxSkew); err != nil {
			return netcheck.TCPProbe{}
		}
	}
	p := netcheck.TCPProbe{Answered: true}
	if r.STUNPort > 0 && r.STUNPort <= 65535 {
		p.STUNPort = uint16(r.STUNPort)
	}
	return p
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
