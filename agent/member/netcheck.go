package member

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/netcheck"
	"github.com/meshd/meshd/pki"
)

// The path check (issue 29 item 5). Every control node answers STUN
// Binding requests on ports.stun (the responder, netcheck.Responder), on
// the bind address, beside its Nebula lighthouse and relay; `meshctl
// netcheck` on any member asks each control node from one UDP socket
// (Netcheck). The STUN port is the cluster's: a record does not carry it,
// so a member asks every control node on its own ports.stun.

// startSTUN binds ports.stun on the bind address and answers there until
// the runtime stops (control nodes only).
func (rt *Runtime) startSTUN() error {
	bind := net.JoinHostPort(rt.cfg.BindAddr, strconv.Itoa(rt.cfg.Ports.STUN))
	conn, err := netcheck.Listen(bind)
	if err != nil {
		return codes.Wrap(codes.PortInUse, err)
	}
	r := netcheck.NewResponder(conn, netcheck.ResponderLimits{}, rt.log.With("component", "stun"), rt.now)
	rt.stun = r
	rt.Spawn(func(ctx context.Context) {
		if err := r.Run(ctx); err != nil {
			rt.log.Error("stun responder stopped", "err", err)
		}
	})
	return nil
}

// netcheckTimeout bounds the UDP exchange of `meshctl netcheck`.
const netcheckTimeout = 2 * time.Second

// Netcheck runs the path check against the cluster's control nodes (the
// others: a control node does not ask itself): their underlay address on
// ports.stun, and their enroll address (probeControl) to tell blocked UDP
// from nodes down or of a release that serves no STUN.
func (rt *Runtime) Netcheck(ctx context.Context) (*apitype.NetcheckReport, error) {
	rep, err := rt.pathCheck(ctx)
	if err != nil {
		return nil, err
	}
	if err := rep.Err(); err != nil {
		rt.log.Warn("netcheck failed", "code", codes.Of(err), "err", err)
	}
	return NetcheckReport(rep), nil
}

// pathCheck is Netcheck's check, as netcheck reports it: the runtime's
// own NAT check (runNATCheck, natpath.go) reads it too.
func (rt *Runtime) pathCheck(ctx context.Context) (*netcheck.Report, error) {
	list, _ := rt.cluster.Records()
	var targets []netcheck.Target
	for _, n := range list {
		if n.ID == rt.facts.NodeID || !n.Active() || n.RoleOf() != pki.RoleControl {
			continue
		}
		ip, err := netip.ParseAddr(n.Underlay)
		if err != nil {
			continue
		}
		t := netcheck.Target{Name: n.Name, STUN: netip.AddrPortFrom(ip.Unmap(), uint16(rt.cfg.Ports.STUN))}
		if ap, err := netip.ParseAddrPort(n.EnrollAddr); err == nil {
			t.TCP = ap
		}
		targets = append(targets, t)
	}
	if len(targets) == 0 {
		return nil, codes.Wrap(codes.NetcheckUnreachable, errNoOtherControl)
	}
	o := netcheck.Options{Timeout: netcheckTimeout, ProbeTCP: rt.probeControl}
	if u := rt.facts.Underlay; u.IsValid() && mesh.IsLocal(u) {
		o.Bind = u
	}
	return netcheck.Check(ctx, targets, o)
}

// probeControl asks a control node, over the internal API's mutual TLS,
// which STUN port it serves. A node that answers but not that (a release
// without the responder, whose silence over UDP proves nothing) is
// answered with no STUN port, as is one whose port only accepts a
// connection.
func (rt *Runtime) probeControl(ctx context.Context, t netcheck.Target) netcheck.TCPProbe {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	port, err := rt.client.PeerSTUN(cctx, t.TCP.String())
	if err == nil {
		p := netcheck.TCPProbe{Answered: true}
		if port > 0 && port <= 65535 {
			p.STUNPort = uint16(port)
		}
		return p
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", t.TCP.String())
	if err != nil {
		return netcheck.TCPProbe{}
	}
	_ = c.Close()
	return netcheck.TCPProbe{Answered: true}
}

var errNoOtherControl = errors.New("no other control node is recorded to check against")

// NetcheckReport is rep as the local API sends it.
func NetcheckReport(rep *netcheck.Report) *apitype.NetcheckReport {
	out := &apitype.NetcheckReport{Local: rep.Local.String(), UDP: rep.UDP, Blocked: rep.Blocked, NAT: rep.NAT,
		Mapping: string(rep.Mapping), Direct: rep.Direct, Relay: rep.Relay}
	for _, a := range rep.Answers {
		t := apitype.NetcheckTarget{Name: a.Name, STUN: a.STUN.String(), Answered: a.Answered}
		if a.Answered {
			t.Mapped, t.RTTms = a.Mapped.String(), float64(a.RTT.Microseconds())/1000
		}
		out.Targets = append(out.Targets, t)
	}
	for _, l := range rep.Lines() {
		out.Lines = append(out.Lines, apitype.PlanCheck{Name: l.Name, Status: apitype.CheckStatus(l.Status), Code: l.Code, Detail: l.Detail})
	}
	return out
}
