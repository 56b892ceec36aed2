package preflight

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Run runs every preflight check of a join with req (`meshctl join
// --plan`) and hands each to emit as it finishes: the token (format,
// version, expiry), the identity on this machine, the underlay address and
// why, the ports, the TUN device, the state dir, each seed (reachable,
// pinned to the token's CA), the clock against a seed, the path check
// (UDP to each seed's STUN port: blocked is codes.OverlayUDPBlocked), and the admission
// (token unused, name free; asked of a pinned seed, which consumes and
// records nothing). It writes nothing; ports and the TUN device are taken
// for an instant and given back. running says this meshd runs a member
// now, whose ports and TUN device a join with --force frees first. The
// result is OK only if a real join would pass every check.
func Run(ctx context.Context, env Env, req apitype.JoinRequest, running bool, emit func(apitype.PlanCheck)) *apitype.PlanResult {
	p := &planner{a: env, running: running, emit: emit, res: &apitype.PlanResult{}}
	p.run(ctx, req)
	p.res.OK = p.res.Failed() == nil
	return p.res
}

// planner collects a plan's checks.
type planner struct {
	a       Env
	running bool
	emit    func(apitype.PlanCheck)
	res     *apitype.PlanResult
}

func (p *planner) add(c apitype.PlanCheck) {
	p.res.Checks = append(p.res.Checks, c)
	p.emit(c)
}

func (p *planner) ok(name, format string, args ...any) {
	p.add(apitype.PlanCheck{Name: name, Status: apitype.CheckOK, Detail: fmt.Sprintf(format, args...)})
}

func (p *planner) warn(name string, code codes.Code, detail string) {
	p.add(apitype.PlanCheck{Name: name, Status: apitype.CheckWarn, Code: code, Detail: detail})
}

func (p *planner) fail(name string, err error) {
	p.add(apitype.PlanCheck{Name: name, Status: apitype.CheckFail, Code: codes.OrInternal(err), Detail: err.Error()})
}

func (p *planner) skip(name, why string) {
	p.add(apitype.PlanCheck{Name: name, Status: apitype.CheckSkip, Detail: why})
}

// run runs the checks in the order a join meets them.
func (p *planner) run(ctx context.Context, req apitype.JoinRequest) {
	a := p.a
	tok, err := enroll.ParseToken(req.Token)
	if err != nil {
		p.fail("token", err)
		for _, name := range []string{"identity", "underlay", "ports", "tun", "state-dir", "seeds", "clock", "netcheck", "admission"} {
			p.skip(name, "the token could not be read")
		}
		return
	}
	now := a.Now()
	if err := a.CheckTokenExpiry(ctx, tok, now); err != nil {
		p.fail("token", err)
	} else {
		admits := tok.Name
		if tok.Key {
			admits = "machines named " + tok.Name + "N (a reusable key)"
		}
		p.ok("token", "version %d, admits %s as %s in cluster %s, expires in %s (%s)", enroll.TokenVersion,
			admits, tok.Role, tok.ClusterID[:8], tok.Expires.Sub(now).Round(time.Second), tok.Expires.UTC().Format(time.RFC3339))
	}

	// Held by this meshd: a member's runtime holds its ports and TUN
	// device, and a join with --force stops it before it binds them again.
	ownRuntime := false
	existing, err := statedir.Load(a.Config.StateDir)
	caErr := statedir.RefuseCAWipe(a.Config.StateDir, "join")
	switch {
	case err != nil && !req.Force:
		p.fail("identity", err)
	case existing != nil && !req.Force:
		p.fail("identity", codes.Wrap(codes.AlreadyJoined, fmt.Errorf("this node is %s", existing)))
	case caErr != nil:
		p.fail("identity", caErr)
	case existing != nil:
		ownRuntime = p.running
		p.ok("identity", "this node is %s; --force replaces that identity", existing)
	default:
		p.ok("identity", "no cluster identity on this machine")
	}

	u, err := a.Underlay(ctx, a.UnderlayPin(req.AdvertiseAddr, req.AdvertiseIface), tok)
	if err != nil {
		p.fail("underlay", err)
	} else {
		p.res.Underlay, p.res.UnderlayWhy, p.res.Route = u.Addr.String(), u.Why, u.Route
		p.ok("underlay", "%s: %s", u.Addr, u.Why)
	}

	p.host(tok.Role, ownRuntime)
	seed := p.seeds(ctx, tok, u.Addr)
	p.netcheck(ctx, tok, u.Addr, seed) // netcheck.go
	p.admission(ctx, tok, u.Addr, seed)
}

// host runs the host checks (hostChecks: the ports, the TUN device, the
// state dir), the same a real join makes before it spends its token
// (CheckHost).
func (p *planner) host(role pki.Role, ownRuntime bool) {
	for _, c := range p.a.hostChecks(role, ownRuntime) {
		detail, err := c.run()
		if err != nil {
			p.fail(c.name, err)
			continue
		}
		p.ok(c.name, "%s", detail)
	}
}

// seeds checks every seed of the token (reachable, pinned to its CA) and
// the clock against the first that reports its time. It returns the first
// seed that passed, or "".
func (p *planner) seeds(ctx context.Context, tok enroll.Token, underlay netip.Addr) string {
	reports := enroll.ProbeSeeds(ctx, tok, p.a.EnrollDeps(underlay, nil, nil))
	var (
		good  string
		clock *enroll.SeedReport
	)
	for i, r := range reports {
		name := "seed " + r.Seed
		if r.Err != nil {
			p.fail(name, r.Err)
			continue
		}
		if good == "" {
			good = r.Seed
		}
		if clock == nil && r.HasClock {
			clock = &reports[i]
		}
		p.ok(name, "reachable from %s; its certificate chains to the CA the token pins (sha256 %s…), role %s",
			r.Local, tok.CA.String()[:16], r.Role)
	}
	switch {
	case good == "":
		p.skip("clock", "no seed could be checked")
	case clock == nil:
		p.skip("clock", "no seed reports its time (an older meshd); a join goes on without comparing clocks")
	default:
		warn, err := clock.Skew.Judge(p.a.Config.MaxClockSkew)
		switch {
		case err != nil:
			p.fail("clock", err)
			return ""
		case warn:
			p.warn("clock", codes.ClockSkewWarning, clock.Skew.String())
		default:
			p.ok("clock", "%s; within %s (max_clock_skew)", clock.Skew, p.a.Config.MaxClockSkew)
		}
	}
	return good
}

// admission asks seed whether the token is still unused and its name
// free: a check that consumes and records nothing.
func (p *planner) admission(ctx context.Context, tok enroll.Token, underlay netip.Addr, seed string) {
	if seed == "" {
		p.skip("admission", "no seed passed its checks (reachable, pinned, clock): the token's secret is sent to none")
		return
	}
	resp, err := enroll.Check(ctx, tok, seed, p.a.EnrollDeps(underlay, nil, nil))
	if err != nil {
		p.fail("admission", err)
		return
	}
	approval := ""
	if resp.Approve {
		approval = "; the join will wait for an operator's approval (`meshctl approve " + resp.Name + " CODE` with the code it shows)"
	}
	p.ok("admission", "seed %s: the token is unused and not revoked, the name %s is free, %s may join as %s until %s%s",
		seed, resp.Name, resp.Name, resp.Role, resp.Expires.UTC().Format(time.RFC3339), approval)
}
