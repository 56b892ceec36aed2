package netcheck

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v3"

	"github.com/meshd/meshd/codes"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		local  uint16
		mapped []netip.AddrPort
		want   Mapping
	}{
		{"unknown/none", 5000, nil, MappingUnknown},
		{"unknown/one", 5000, []netip.AddrPort{ap("198.51.100.1:5000")}, MappingUnknown},
		{"port-preserving", 5000, []netip.AddrPort{ap("198.51.100.1:5000"), ap("198.51.100.1:5000")}, MappingPortPreserving},
		{"endpoint-independent", 5000, []netip.AddrPort{ap("198.51.100.1:61000"), ap("198.51.100.1:61000")}, MappingEndpointIndependent},
		{"symmetric", 5000, []netip.AddrPort{ap("198.51.100.1:61000"), ap("198.51.100.1:61001")}, MappingSymmetric},
		{"symmetric/one-preserved", 5000, []netip.AddrPort{ap("198.51.100.1:5000"), ap("198.51.100.1:61001")}, MappingSymmetric},
		{"symmetric/three", 5000, []netip.AddrPort{ap("198.51.100.1:61000"), ap("198.51.100.1:61000"), ap("198.51.100.1:61002")}, MappingSymmetric},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Judge(tc.local, tc.mapped); got != tc.want {
				t.Errorf("Judge(%d, %v) = %s, want %s", tc.local, tc.mapped, got, tc.want)
			}
		})
	}
}

// TestReportVerdicts: the lines and the error of reports built by hand.
func TestReportVerdicts(t *testing.T) {
	local := ap("192.168.1.10:40000")
	answer := func(name, mapped string) Answer {
		return Answer{Target: Target{Name: name, STUN: ap("203.0.113.1:3478")}, Answered: true, Mapped: ap(mapped)}
	}
	for _, tc := range []struct {
		name    string
		answers []Answer
		blocked bool
		codes   []codes.Code
		err     codes.Code
		direct  bool
	}{
		{"port-preserving", []Answer{answer("c1", "198.51.100.7:40000"), answer("c2", "198.51.100.7:40000")}, false,
			[]codes.Code{codes.NetcheckAnswered, codes.NetcheckAnswered, codes.NetcheckPortPreserving, codes.NetcheckDirect}, "", true},
		{"no-nat", []Answer{answer("c1", "192.168.1.10:40000"), answer("c2", "192.168.1.10:40000")}, false,
			[]codes.Code{codes.NetcheckAnswered, codes.NetcheckAnswered, codes.NetcheckNoNAT, codes.NetcheckDirect}, "", true},
		{"symmetric", []Answer{answer("c2", "198.51.100.7:1025"), answer("c1", "198.51.100.7:1026")}, false,
			[]codes.Code{codes.NetcheckAnswered, codes.NetcheckAnswered, codes.NetcheckSymmetric, codes.NetcheckRelayed}, "", false},
		{"one-answered", []Answer{answer("c1", "198.51.100.7:40000"), {Target: Target{Name: "c2"}}}, false,
			[]codes.Code{codes.NetcheckAnswered, codes.NetcheckNoAnswer, codes.NetcheckMappingUnknown, codes.NetcheckDirect}, "", true},
		{"blocked", []Answer{{Target: Target{Name: "c1", STUN: ap("203.0.113.1:3478")}, TCPTried: true, TCPAnswered: true, ServedSTUN: 3478}}, true,
			[]codes.Code{codes.OverlayUDPBlocked}, codes.OverlayUDPBlocked, false},
		{"unreachable", []Answer{{Target: Target{Name: "c1"}, TCPTried: true}}, false,
			[]codes.Code{codes.NetcheckUnreachable}, codes.NetcheckUnreachable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Local: local, Answers: tc.answers, Blocked: tc.blocked}
			judge(r)
			var got []codes.Code
			for _, l := range r.Lines() {
				got = append(got, l.Code)
			}
			if len(got) != len(tc.codes) {
				t.Fatalf("lines %v, want %v", got, tc.codes)
			}
			for i := range got {
				if got[i] != tc.codes[i] {
					t.Errorf("line %d: %s, want %s (%+v)", i, got[i], tc.codes[i], r.Lines()[i])
				}
			}
			if c := codes.Of(r.Err()); c != tc.err {
				t.Errorf("Err code %q, want %q", c, tc.err)
			}
			if r.Direct != tc.direct {
				t.Errorf("Direct %v, want %v", r.Direct, tc.direct)
			}
			if r.UDP && r.Relay != "c1" {
				t.Errorf("relay %q, want c1 (the first by name that answered)", r.Relay)
			}
		})
	}
}

// responder starts a responder on 127.0.0.1 for the test's lifetime.
func responder(t *testing.T, limits ResponderLimits) *Responder {
	t.Helper()
	conn, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := NewResponder(conn, limits, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Errorf("responder: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

func addrOf(r *Responder) netip.AddrPort { return r.Addr().(*net.UDPAddr).AddrPort() }

// TestCheckLoopback: two responders on loopback answer one socket with
// its own address (no NAT on loopback: port-preserving, direct).
func TestCheckLoopback(t *testing.T) {
	r1, r2 := responder(t, ResponderLimits{}), responder(t, ResponderLimits{})
	rep, err := Check(t.Context(), []Target{{Name: "c2", STUN: addrOf(r2)}, {Name: "c1", STUN: addrOf(r1)}},
		Options{Bind: netip.MustParseAddr("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rep.Answers {
		if !a.Answered || a.Mapped != rep.Local {
			t.Errorf("%s: answered %v, mapped %s, want the local %s", a.Name, a.Answered, a.Mapped, rep.Local)
		}
	}
	if !rep.UDP || rep.NAT || rep.Mapping != MappingPortPreserving || !rep.Direct || rep.Relay != "c1" || rep.Err() != nil {
		t.Errorf("report %+v", rep)
	}
	// The responder counts an answer once its write returned, which may be
	// after the client read it: wait for the count, with a deadline.
	deadline := time.Now().Add(2 * time.Second)
	for r1.Stats().Answered < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := r1.Stats(); s.Answered < 1 || s.Malformed != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestCheckReturnsOnLastAnswer: Check returns as soon as every target
// answered, not at its next retry: a join waits on it (it used to take a
// whole 250 ms retry interval when every answer was in after 2 ms).
func TestCheckReturnsOnLastAnswer(t *testing.T) {
	r1, r2 := responder(t, ResponderLimits{}), responder(t, ResponderLimits{})
	start := time.Now()
	rep, err := Check(t.Context(), []Target{{Name: "c1", STUN: addrOf(r1)}, {Name: "c2", STUN: addrOf(r2)}},
		Options{Bind: netip.MustParseAddr("127.0.0.1"), Retry: 10 * time.Second, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 5*time.Second || !rep.UDP || !rep.Answers[0].Answered || !rep.Answers[1].Answered {
		t.Errorf("check took %s (retry 10 s), report %+v", took, rep)
	}
}

// TestCheckBlocked: nothing answers over UDP while the TCP control
// port accepts: OverlayUDPBlocked; nothing on TCP either:
// NetcheckUnreachable.
func TestCheckBlocked(t *testing.T) {
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}) // reads nothing: a drop
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tcp := ln.Addr().(*net.TCPAddr).AddrPort()
	stunAt := silent.LocalAddr().(*net.UDPAddr).AddrPort()
	o := Options{Timeout: 300 * time.Millisecond, Retry: 100 * time.Millisecond, Again: 300 * time.Millisecond, ProbeTCP: served(stunAt.Port())}
	rep, err := Check(t.Context(), []Target{{Name: "c1", STUN: stunAt, TCP: tcp}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.UDP || !rep.Blocked || codes.Of(rep.Err()) != codes.OverlayUDPBlocked {
		t.Errorf("report %+v, err %v", rep, rep.Err())
	}
	ln.Close()
	rep, err = Check(t.Context(), []Target{{Name: "c1", STUN: silent.LocalAddr().(*net.UDPAddr).AddrPort(), TCP: tcp}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.UDP || rep.Blocked || codes.Of(rep.Err()) != codes.NetcheckUnreachable {
		t.Errorf("report %+v, err %v", rep, rep.Err())
	}
}

// served is a TCP probe that dials the target's control port and, when it
// answers, says it serves STUN on port.
func served(port uint16) func(context.Context, Target) TCPProbe {
	return func(ctx context.Context, t Target) TCPProbe {
		p := dialTCP(ctx, t)
		if p.Answered {
			p.STUNPort = port
		}
		return p
	}
}

// TestCheckNotServed (fail closed but correct): no UDP answer counts as
// blocked only from a target whose control port answered and says it
// serves STUN on the port asked. A target of a release without the
// responder (no port said), one serving another port, or a plain dial
// that learns no port leave the check unchecked: no error, a
// NetcheckNotServed line. One target that does serve among them is
// enough for the blocked verdict.
func TestCheckNotServed(t *testing.T) {
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stunAt, tcp := silent.LocalAddr().(*net.UDPAddr).AddrPort(), ln.Addr().(*net.TCPAddr).AddrPort()
	byName := func(ports map[string]uint16) func(context.Context, Target) TCPProbe {
		return func(ctx context.Context, t Target) TCPProbe { return served(ports[t.Name])(ctx, t) }
	}
	for _, tc := range []struct {
		name    string
		probe   func(context.Context, Target) TCPProbe
		targets []string
		blocked bool
		lines   []codes.Code
	}{
		{"older-release", byName(nil), []string{"c1"}, false, []codes.Code{codes.NetcheckNotServed}},
		{"other-port", byName(map[string]uint16{"c1": stunAt.Port() + 1}), []string{"c1"}, false, []codes.Code{codes.NetcheckNotServed}},
		{"plain-dial", nil, []string{"c1"}, false, []codes.Code{codes.NetcheckNotServed}},
		{"all-older", byName(nil), []string{"c1", "c2"}, false, []codes.Code{codes.NetcheckNotServed, codes.NetcheckNotServed}},
		{"mixed", byName(map[string]uint16{"c2": stunAt.Port()}), []string{"c1", "c2"}, true, []codes.Code{codes.NetcheckNotServed, codes.OverlayUDPBlocked}},
		{"serves", byName(map[string]uint16{"c1": stunAt.Port()}), []string{"c1"}, true, []codes.Code{codes.OverlayUDPBlocked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var targets []Target
			for _, n := range tc.targets {
				targets = append(targets, Target{Name: n, STUN: stunAt, TCP: tcp})
			}
			rep, err := Check(t.Context(), targets, Options{Timeout: 300 * time.Millisecond, Retry: 100 * time.Millisecond, Again: 300 * time.Millisecond, ProbeTCP: tc.probe})
			if err != nil {
				t.Fatal(err)
			}
			wantErr := codes.Code("")
			if tc.blocked {
				wantErr = codes.OverlayUDPBlocked
			}
			if rep.UDP || rep.Blocked != tc.blocked || rep.Unchecked == tc.blocked || codes.Of(rep.Err()) != wantErr {
				t.Errorf("report %+v, err %v; want blocked %v", rep, rep.Err(), tc.blocked)
			}
			lines := rep.Lines()
			if len(lines) != len(tc.lines) {
				t.Fatalf("lines %+v, want codes %v", lines, tc.lines)
			}
			for i, l := range lines {
				if l.Code != tc.lines[i] {
					t.Errorf("line %d %+v, want code %s", i, l, tc.lines[i])
				}
				if l.Code == codes.NetcheckNotServed && (l.Status != StatusWarn || !strings.HasPrefix(l.Detail, "not checked: ")) {
					t.Errorf("line %d %+v: want a warning that says not checked", i, l)
				}
			}
		})
	}
}

// TestResponderBounded: junk and non-Binding STUN messages are counted
// and dropped, and one source past its rate is not answered.
func TestResponderBounded(t *testing.T) {
	r := responder(t, ResponderLimits{PerSource: 3, Window: time.Hour})
	c, err := net.DialUDP("udp", nil, r.Addr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	indication, _ := stun.Build(stun.TransactionID, stun.NewType(stun.MethodBinding, stun.ClassIndication))
	for _, pkt := range [][]byte{[]byte("not stun at all"), make([]byte, 20), indication.Raw} {
		if _, err := c.Write(pkt); err != nil {
			t.Fatal(err)
		}
	}
	answered := 0
	buf := make([]byte, 1500)
	for range 5 {
		req, _ := stun.Build(stun.TransactionID, stun.BindingRequest, stun.Fingerprint)
		if _, err := c.Write(req.Raw); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Read(buf)
		if err != nil {
			continue
		}
		m := &stun.Message{Raw: buf[:n]}
		var xa stun.XORMappedAddress
		if m.Decode() != nil || m.TransactionID != req.TransactionID || xa.GetFrom(m) != nil || xa.Port != c.LocalAddr().(*net.UDPAddr).Port {
			t.Fatalf("bad answer %v", m)
		}
		answered++
	}
	if answered != 3 {
		t.Errorf("%d answered, want 3 (the rate)", answered)
	}
	if s := r.Stats(); s.Malformed != 3 || s.Limited != 2 || s.Answered != 3 {
		t.Errorf("stats %+v, want 3 malformed, 2 limited, 3 answered", s)
	}
}

// TestCheckSlowIsNotBlocked (issue 54 item 5): a control node that
// answers STUN only after its first second (busy) while its TCP port
// answers at once is late, not blocked: the second exchange hears it,
// the check has no error and says NetcheckSlow with the time. On main
// before, the same answered OverlayUDPBlocked, and a join failed.
func TestCheckSlowIsNotBlocked(t *testing.T) {
	slow, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	busyUntil := time.Now().Add(time.Second)
	go func() { // answers nothing for a second, then as the responder does
		buf := make([]byte, 1500)
		for {
			n, from, err := slow.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			req := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
			if time.Now().Before(busyUntil) || req.Decode() != nil {
				continue
			}
			resp, err := stun.Build(stun.NewTransactionIDSetter(req.TransactionID), stun.BindingSuccess,
				&stun.XORMappedAddress{IP: from.Addr().AsSlice(), Port: int(from.Port())}, stun.Fingerprint)
			if err == nil {
				_, _ = slow.WriteToUDPAddrPort(resp.Raw, from)
			}
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stunAt := slow.LocalAddr().(*net.UDPAddr).AddrPort()
	o := Options{Bind: netip.MustParseAddr("127.0.0.1"), Timeout: 300 * time.Millisecond, Retry: 100 * time.Millisecond,
		Again: 3 * time.Second, ProbeTCP: served(stunAt.Port())}
	rep, err := Check(t.Context(), []Target{{Name: "c1", STUN: stunAt, TCP: ln.Addr().(*net.TCPAddr).AddrPort()}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.UDP || rep.Blocked || rep.Err() != nil || rep.Late < 900*time.Millisecond {
		t.Fatalf("report %+v, err %v; want UDP working, not blocked, late by about a second", rep, rep.Err())
	}
	if !slices.ContainsFunc(rep.Lines(), func(l Line) bool { return l.Code == codes.NetcheckSlow }) {
		t.Fatalf("lines %+v lack %s", rep.Lines(), codes.NetcheckSlow)
	}
}
