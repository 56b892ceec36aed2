package netcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"time"

	"github.com/pion/stun/v3"
)

// Target is one control node to check: its name, its STUN address and
// its TCP control address (dialled only when no target answered over UDP,
// to tell UDP blocked from control nodes down).
type Target struct {
	Name string
	STUN netip.AddrPort
	TCP  netip.AddrPort // zero: not dialled
}

// Options tune Check.
type Options struct {
	// Bind is the local IP the UDP socket binds (the underlay address);
	// zero: any.
	Bind netip.Addr
	// Timeout bounds the UDP exchange. Zero: 2 s.
	Timeout time.Duration
	// Retry is how often an unanswered request is sent again. Zero: 250 ms.
	Retry time.Duration
	// Again bounds a second UDP exchange, run when the first ended
	// Blocked (a target that serves STUN answered on TCP, none over UDP):
	// a busy control node answers late, and late is not blocked (issue 54
	// item 5). Zero: 3 s.
	Again time.Duration
	// ProbeTCP asks a target's TCP control address, when no target
	// answered over UDP, whether it answers and which STUN port it
	// serves. Nil: a plain TCP dial, which learns no STUN port, so it
	// never makes a Blocked verdict.
	ProbeTCP func(ctx context.Context, t Target) TCPProbe
}

// TCPProbe is what a target's TCP control address told, asked when no
// target answered over UDP.
type TCPProbe struct {
	// Answered: it answered (and, for a caller that checks it, proved
	// itself a control node whose word counts: pinned to the cluster's
	// CA, its clock in bound).
	Answered bool
	// STUNPort is the UDP port it says it answers STUN on; 0 when it does
	// not say (a release without the responder). Only a target that says
	// it serves the very port asked turns a missing UDP answer into
	// UDP blocked.
	STUNPort uint16
}

// Answer is one target's outcome.
type Answer struct {
	Target
	Answered bool
	Mapped   netip.AddrPort // the address the target saw this check come from
	RTT      time.Duration
	// TCP is whether the target's TCP control address answered (the
	// probe's Answered); asked only when no target answered over UDP.
	TCPTried, TCPAnswered bool
	// ServedSTUN is the STUN port the target's control address said it
	// serves (TCPProbe.STUNPort); 0: it did not say.
	ServedSTUN uint16
}

// Serves is whether the target said it answers STUN on the port asked:
// only then does its silence over UDP count.
func (a Answer) Serves() bool {
	return a.TCPAnswered && a.ServedSTUN != 0 && a.ServedSTUN == a.STUN.Port()
}

// Mapping is what a NAT does with this node's UDP source port.
type Mapping string

const (
	// MappingPortPreserving: every target saw this node's own local port.
	MappingPortPreserving Mapping = "port-preserving"
	// MappingEndpointIndependent: every target saw the same port, not the
	// local one.
	MappingEndpointIndependent Mapping = "endpoint-independent"
	// MappingSymmetric: targets saw different ports; a hole punched for
	// one peer does not serve another.
	MappingSymmetric Mapping = "symmetric"
	// MappingUnknown: fewer than two targets answered.
	MappingUnknown Mapping = "unknown"
)

// Report is a check's outcome.
type Report struct {
	Local   netip.AddrPort // the socket's local address
	Answers []Answer       // one per target, in the order given
	// UDP is whether at least one target answered over UDP.
	UDP bool
	// Blocked: no target answered over UDP while one that says it serves
	// STUN on the port asked answered on TCP.
	Blocked bool
	// Unchecked: no target answered over UDP and none that answered on
	// TCP serves STUN on the port asked (a release without the
	// responder): the check cannot tell, which is no failure.
	Unchecked bool
	// NAT: a target saw another address than the local one.
	NAT     bool
	Mapping Mapping
	// Direct is whether a direct path to a node behind another NAT can be
	// punched: UDP works and the mapping is not symmetric.
	Direct bool
	// Relay is the control node that would carry the traffic that takes
	// no direct path: the first target that answered over UDP, by name.
	Relay string
	// Late is how long after the check began UDP first answered, when it
	// did only in the second exchange (Options.Again): UDP works, a
	// control node was slow. Zero otherwise.
	Late time.Duration
}

// Judge is the mapping the answered targets' mapped addresses show, for
// a socket bound to local port.
func Judge(local uint16, mapped []netip.AddrPort) Mapping {
	if len(mapped) < 2 {
		return MappingUnknown
	}
	same, preserved := true, true
	for _, m := range mapped {
		same = same && m.Port() == mapped[0].Port()
		preserved = preserved && m.Port() == local
	}
	switch {
	case !same:
		return MappingSymmetric
	case preserved:
		return MappingPortPreserving
	default:
		return MappingEndpointIndependent
	}
}

// Check sends a STUN Binding request from one local UDP socket to each
// target, again every o.Retry while unanswered, until all answered (it
// returns with the last answer) or o.Timeout passed, and judges the answers. When no target answered over
// UDP it dials each target's TCP address to tell blocked UDP (Blocked)
// from targets that are down. An error means the check could not run
// (no socket); a blocked network is a Report, not an error.
func Check(ctx context.Context, targets []Target, o Options) (*Report, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Retry <= 0 {
		o.Retry = 250 * time.Millisecond
	}
	if o.Again <= 0 {
		o.Again = 3 * time.Second
	}
	if len(targets) == 0 {
		return nil, errors.New("no control node to check against")
	}
	bind := &net.UDPAddr{}
	if o.Bind.IsValid() {
		bind.IP = o.Bind.AsSlice()
	}
	conn, err := net.ListenUDP("udp", bind)
	if err != nil {
		return nil, fmt.Errorf("netcheck socket: %w", err)
	}
	defer conn.Close()
	rep := &Report{Local: conn.LocalAddr().(*net.UDPAddr).AddrPort(), Answers: make([]Answer, len(targets))}
	for i, t := range targets {
		rep.Answers[i].Target = t
	}
	began := time.Now()
	exchange(ctx, conn, rep, o)
	judge(rep)
	if !rep.UDP {
		probeTCP(ctx, rep, o.ProbeTCP)
	}
	if rep.Blocked && ctx.Err() == nil {
		again := o
		again.Timeout = o.Again
		exchange(ctx, conn, rep, again)
		if judge(rep); rep.UDP {
			rep.Blocked, rep.Unchecked, rep.Late = false, false, time.Since(began)
		}
	}
	return rep, nil
}

// exchange runs the requests and reads the answers into rep.
func exchange(ctx context.Context, conn *net.UDPConn, rep *Report, o Options) {
	deadline := time.Now().Add(o.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ids := map[[stun.TransactionIDSize]byte]int{}
	sent := make([]time.Time, len(rep.Answers))
	reqs := make([]*stun.Message, len(rep.Answers))
	for i := range rep.Answers {
		m, err := stun.Build(stun.TransactionID, stun.BindingRequest, stun.Fingerprint)
		if err != nil {
			continue
		}
		reqs[i], ids[m.TransactionID] = m, i
	}
	buf := make([]byte, 1500)
	for next := time.Now(); ; {
		now := time.Now()
		if !now.Before(deadline) || ctx.Err() != nil {
			return
		}
		if !now.Before(next) {
			pending := 0
			for i, a := range rep.Answers {
				if a.Answered || reqs[i] == nil || !a.STUN.IsValid() {
					continue
				}
				pending++
				if sent[i].IsZero() {
					sent[i] = now
				}
				_, _ = conn.WriteToUDPAddrPort(reqs[i].Raw, a.STUN) // an unreachable target stays unanswered
			}
			if pending == 0 {
				return
			}
			next = now.Add(o.Retry)
		}
		_ = conn.SetReadDeadline(minTime(next, deadline))
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			continue // the deadline, or an ICMP error from one target
		}
		i, mapped, ok := parseAnswer(buf[:n], ids)
		if !ok || rep.Answers[i].Answered || from.Addr().Unmap() != rep.Answers[i].STUN.Addr().Unmap() {
			continue
		}
		a := &rep.Answers[i]
		a.Answered, a.Mapped, a.RTT = true, mapped, time.Since(sent[i])
		if allAnswered(rep, reqs) {
			return // not at the next retry tick: a join waits on this
		}
	}
}

// allAnswered is whether every target a request went to has answered.
func allAnswered(rep *Report, reqs []*stun.Message) bool {
	for i, a := range rep.Answers {
		if !a.Answered && reqs[i] != nil && a.STUN.IsValid() {
			return false
		}
	}
	return true
}

// parseAnswer reads a Binding success response to one of ids: the
// target's index and the mapped address.
func parseAnswer(pkt []byte, ids map[[stun.TransactionIDSize]byte]int) (int, netip.AddrPort, bool) {
	if !stun.IsMessage(pkt) {
		return 0, netip.AddrPort{}, false
	}
	m := &stun.Message{Raw: append([]byte(nil), pkt...)}
	if err := m.Decode(); err != nil || m.Type != stun.BindingSuccess {
		return 0, netip.AddrPort{}, false
	}
	i, ok := ids[m.TransactionID]
	if !ok {
		return 0, netip.AddrPort{}, false
	}
	var xa stun.XORMappedAddress
	if err := xa.GetFrom(m); err != nil {
		return 0, netip.AddrPort{}, false
	}
	ip, ok := netip.AddrFromSlice(xa.IP)
	if !ok || xa.Port < 1 || xa.Port > 65535 {
		return 0, netip.AddrPort{}, false
	}
	return i, netip.AddrPortFrom(ip.Unmap(), uint16(xa.Port)), true
}

// judge fills the verdict from the answers.
func judge(rep *Report) {
	var mapped []netip.AddrPort
	var relays []string
	for _, a := range rep.Answers {
		if !a.Answered {
			continue
		}
		mapped = append(mapped, a.Mapped)
		relays = append(relays, a.Name)
		behind := a.Mapped.Port() != rep.Local.Port() ||
			(!rep.Local.Addr().IsUnspecified() && a.Mapped.Addr() != rep.Local.Addr().Unmap())
		rep.NAT = rep.NAT || behind
	}
	rep.UDP = len(mapped) > 0
	rep.Mapping = Judge(rep.Local.Port(), mapped)
	rep.Direct = rep.UDP && rep.Mapping != MappingSymmetric
	sort.Strings(relays)
	if len(relays) > 0 {
		rep.Relay = relays[0]
	}
}

// probeTCP asks each target's TCP address whether it answers and
// whether it serves STUN on the port asked, to tell blocked UDP from
// targets that are down or serve no STUN.
func probeTCP(ctx context.Context, rep *Report, probe func(context.Context, Target) TCPProbe) {
	if probe == nil {
		probe = dialTCP
	}
	answered := false
	for i := range rep.Answers {
		a := &rep.Answers[i]
		if !a.TCP.IsValid() {
			continue
		}
		p := probe(ctx, a.Target)
		a.TCPTried, a.TCPAnswered, a.ServedSTUN = true, p.Answered, p.STUNPort
		answered = answered || p.Answered
		rep.Blocked = rep.Blocked || a.Serves()
	}
	rep.Unchecked = answered && !rep.Blocked
}

// dialTCP is the plain probe: the address accepts a connection. It
// learns no STUN port.
func dialTCP(ctx context.Context, t Target) TCPProbe {
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", t.TCP.String())
	if err != nil {
		return TCPProbe{}
	}
	_ = c.Close()
	return TCPProbe{Answered: true}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
