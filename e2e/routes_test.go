//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// lanHost is the host on the LAN behind the routers (no meshd on it).
const lanHost = "192.168.50.10"

// addLAN builds a LAN behind routers: a namespace holding bridge br1, a
// plain host at lanHost, and on each router an eth1 with 192.168.50.<i+1>.
// It returns the LAN host's namespace name.
func addLAN(t *testing.T, n *Net, routers ...*Host) string {
	t.Helper()
	hub, lan := n.prefix+"-lan", n.prefix+"-lh"
	for _, ns := range []string{hub, lan} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		n.in(ns, "ip", "link", "set", "lo", "up")
	}
	n.in(hub, "ip", "link", "add", "br1", "type", "bridge")
	n.in(hub, "ip", "link", "set", "br1", "up")
	attach := func(ns, link, ifname, addr string) {
		run(t, "ip", "link", "add", link, "type", "veth", "peer", "name", ifname, "netns", ns)
		run(t, "ip", "link", "set", link, "netns", hub)
		n.in(hub, "ip", "link", "set", link, "master", "br1")
		n.in(hub, "ip", "link", "set", link, "up")
		n.in(ns, "ip", "addr", "add", addr+"/24", "dev", ifname)
		n.in(ns, "ip", "link", "set", ifname, "up")
	}
	attach(lan, n.prefix+"lh", "eth0", lanHost)
	for i, r := range routers {
		attach(r.Name, fmt.Sprintf("%sl%d", n.prefix, i+1), "eth1", fmt.Sprintf("192.168.50.%d", i+1))
	}
	return lan
}

// routeRows is `meshctl routes list -o json` on nd.
func routeRows(t *testing.T, nd *Node) apitype.Routes {
	t.Helper()
	var r apitype.Routes
	if err := nd.CtlJSON(t.Context(), &r, "routes", "list"); err != nil {
		t.Fatal(err)
	}
	return r
}

// carrierOn is the node nd sees carrying prefix ("" for none).
func carrierOn(t *testing.T, nd *Node, prefix string) string {
	for _, r := range routeRows(t, nd).Routes {
		if r.Prefix == prefix && r.Carrier {
			return r.Node
		}
	}
	return ""
}

// pingStream is a 100 ms ping stream from a host; it records the time of
// every reply.
type pingStream struct {
	mu      sync.Mutex
	replies []time.Time
	cmd     *exec.Cmd
	done    chan struct{}
}

func startPingStream(t *testing.T, h *Host, ip string) *pingStream {
	t.Helper()
	ps := &pingStream{done: make(chan struct{})}
	ps.cmd = h.Exec(t.Context(), "ping", "-i", "0.1", "-W", "1", "-D", ip)
	out, err := ps.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.stop)
	go func() {
		defer close(ps.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "bytes from") || !strings.HasPrefix(line, "[") {
				continue
			}
			end := strings.IndexByte(line, ']')
			f, err := strconv.ParseFloat(line[1:end], 64)
			if err != nil {
				continue
			}
			at := time.Unix(0, int64(f*1e9))
			ps.mu.Lock()
			ps.replies = append(ps.replies, at)
			ps.mu.Unlock()
		}
	}()
	return ps
}

func (ps *pingStream) stop() {
	if ps.cmd.Process != nil {
		_ = ps.cmd.Process.Kill()
	}
	<-ps.done
}

// repliesAfter counts the replies after at.
func (ps *pingStream) repliesAfter(at time.Time) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, r := range ps.replies {
		if r.After(at) {
			n++
		}
	}
	return n
}

// gapAround is the longest time without a reply between the last reply
// before at and the first after it: the traffic's outage.
func (ps *pingStream) gapAround(at time.Time) time.Duration {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	i, _ := slices.BinarySearchFunc(ps.replies, at, func(r, t time.Time) int { return r.Compare(t) })
	if i == 0 || i == len(ps.replies) {
		return -1
	}
	var gap time.Duration
	for j := i; j < len(ps.replies); j++ {
		gap = max(gap, ps.replies[j].Sub(ps.replies[j-1]))
		if ps.replies[j].Sub(at) > 2*time.Second+gap {
			break
		}
	}
	return gap
}

// TestRoutes (issue 33 items 1, 2, 5), at `timers: lan` (the defaults
// operators run; the failover's own probing is the same at every timers
// profile): c1 (control), r1 and r2 (routers, each with eth1 on the LAN
// 192.168.50.0/24 behind them), w1 (a worker that reaches the LAN host).
//   - nothing is carried before approval: w1 does not reach the LAN host;
//     bad requests are refused with their codes;
//   - r1 then r2 approved: r1 carries (approved first), r2 stands by; w1
//     reaches the LAN host; each router's certificate holds the prefix;
//   - r1 killed: a 100 ms ping stream from w1 resumes through r2 within
//     3 s (the gap is logged); r1 back: the prefix stays on r2 (no flap)
//     until `routes prefer r1` moves it;
//   - `meshctl remove r1` (the carrier): r2 carries it within 2 s.
func TestRoutes(t *testing.T) {
	n := NewNet(t)
	n.Timers = "lan"
	c1 := n.NewNode("c1")
	c1.Start(t)
	c1.MustCtl(t, "init", "--cluster", "e2e")
	var nodes []*Node
	for _, name := range []string{"r1", "r2", "w1"} {
		nd := n.NewNode(name)
		nd.Start(t)
		nd.MustCtl(t, "join", c1.Admit(t, name))
		nodes = append(nodes, nd)
	}
	r1, r2, w1 := nodes[0], nodes[1], nodes[2]
	addLAN(t, n, r1.Host, r2.Host)
	const lan = "192.168.50.0/24"

	// Bad requests: refused with their codes, nothing recorded.
	for _, c := range []struct {
		args []string
		want codes.Code
	}{
		{[]string{"10.42.0.0/24"}, codes.RouteBad},           // inside the overlay
		{[]string{"192.168.50.7/24"}, codes.RouteBad},        // host bits
		{[]string{"10.99.0.0/24"}, codes.RouteUnderlay},      // holds c1's underlay
		{[]string{lan, "192.168.50.128/25"}, codes.RouteBad}, // overlap within the request
	} {
		out, errs, code := r1.Ctl(t.Context(), append([]string{"routes", "advertise"}, c.args...)...)
		if code == 0 || !strings.Contains(errs, string(c.want)) {
			t.Fatalf("routes advertise %v: exit %d, want %s\n%s%s", c.args, code, c.want, out, errs)
		}
	}
	r1.MustCtl(t, "routes", "advertise", lan)
	r2.MustCtl(t, "routes", "advertise", lan)
	if _, errs, code := w1.Ctl(t.Context(), "routes", "approve", "r1", lan); code == 0 || !strings.Contains(errs, string(codes.NotControl)) {
		t.Fatalf("approve on a worker: exit %d, want %s\n%s", code, codes.NotControl, errs)
	}

	// Asked, not approved: nobody carries it, w1 does not reach the LAN.
	Eventually(t, 10*time.Second, "w1 sees both requests", func() error {
		rows := routeRows(t, w1).Routes
		if len(rows) != 2 || rows[0].State != "requested" || rows[1].State != "requested" {
			return fmt.Errorf("rows %+v", rows)
		}
		return nil
	})
	if err := w1.Ping(t.Context(), lanHost); err == nil {
		t.Fatal("w1 reaches the LAN host before any approval")
	}

	c1.MustCtl(t, "routes", "approve", "r1", lan)
	c1.MustCtl(t, "routes", "approve", "r2", lan)
	// An approved prefix refuses an overlapping request (a mere request
	// refuses nobody: state.TestUnapprovedRequestsBlockNobody).
	if _, errs, code := w1.Ctl(t.Context(), "routes", "advertise", "192.168.0.0/16"); code == 0 || !strings.Contains(errs, string(codes.RouteOverlap)) {
		t.Fatalf("a prefix overlapping an approved one: exit %d, want %s\n%s", code, codes.RouteOverlap, errs)
	}
	Eventually(t, 30*time.Second, "w1 reaches the LAN host through r1", func() error {
		if c := carrierOn(t, w1, lan); c != "r1" {
			return fmt.Errorf("carrier %q", c)
		}
		return w1.Ping(t.Context(), lanHost)
	})
	for _, nd := range []*Node{c1, w1} {
		rows := routeRows(t, nd).Routes
		if len(rows) != 2 || !rows[0].Active || rows[0].Node != "r1" || !rows[1].Standby || rows[1].Node != "r2" {
			t.Fatalf("%s: routes list %+v, want r1 carrying and r2 standing by", nd.NodeName, rows)
		}
	}
	if out := c1.MustCtl(t, "audit"); !strings.Contains(out, string(codes.EventRouteApproved)) || !strings.Contains(out, "uid=0@c1") {
		t.Errorf("the audit log does not name the approval and who approved:\n%s", out)
	}

	// Failover: r1 killed, the stream resumes through r2 within 3 s.
	ps := startPingStream(t, w1.Host, lanHost)
	Eventually(t, 5*time.Second, "the ping stream runs", func() error {
		if ps.repliesAfter(time.Now().Add(-time.Second)) < 3 {
			return fmt.Errorf("few replies")
		}
		return nil
	})
	killed := time.Now()
	r1.Kill()
	Eventually(t, 15*time.Second, "the stream resumes through r2", func() error {
		if ps.repliesAfter(killed.Add(500*time.Millisecond)) < 5 {
			return fmt.Errorf("%d replies since the kill", ps.repliesAfter(killed))
		}
		return nil
	})
	gap := ps.gapAround(killed)
	t.Logf("failover: the 100 ms ping stream's gap was %v (timers lan)", gap)
	if gap < 0 || gap > 3*time.Second {
		t.Errorf("failover gap %v, want at most 3s", gap)
	}
	if c := carrierOn(t, c1, lan); c != "r2" {
		t.Fatalf("after the failover c1 says %q carries %s", c, lan)
	}

	// Told to move it back while r1 is down: refused, nothing moved.
	if _, errs, code := c1.Ctl(t.Context(), "routes", "prefer", "r1", lan); code == 0 || !strings.Contains(errs, string(codes.CarrierUnreachable)) {
		t.Fatalf("routes prefer to a dead router: exit %d, want %s\n%s", code, codes.CarrierUnreachable, errs)
	}

	// r1 back: no flap; told, the prefix moves back.
	r1.Start(t)
	Eventually(t, 30*time.Second, "r1 alive again", func() error {
		for _, r := range routeRows(t, c1).Routes {
			if r.Node == "r1" && r.Gossip == "alive" {
				return nil
			}
		}
		return fmt.Errorf("r1 not alive")
	})
	c1.MustCtl(t, "ping", "r1", "-c", "3", "-i", "300ms") // a few probe rounds of the leader's watch
	if c := carrierOn(t, c1, lan); c != "r2" {
		t.Fatalf("r1's return moved %s to %q: it must stay until told", lan, c)
	}
	c1.MustCtl(t, "routes", "prefer", "r1", lan)
	Eventually(t, 10*time.Second, "w1 reaches the LAN host through r1 again", func() error {
		if c := carrierOn(t, w1, lan); c != "r1" {
			return fmt.Errorf("carrier %q", c)
		}
		return w1.Ping(t.Context(), lanHost)
	})

	// Removal of the carrier: r2 carries within 2 s.
	c1.MustCtl(t, "remove", "r1")
	removed := time.Now()
	took := Eventually(t, 2*time.Second, "r2 carries after r1's removal, as w1 sees it", func() error {
		if c := carrierOn(t, w1, lan); c != "r2" {
			return fmt.Errorf("carrier %q", c)
		}
		return w1.Ping(t.Context(), lanHost)
	})
	t.Logf("removal of the carrier: w1 reached the LAN through r2 %v after `meshctl remove` returned (%v)", took, time.Since(removed))

	// The router's firewall decides what it forwards: rules that do not
	// name the prefix (local_cidr) let nothing routed through; a rule
	// naming it lets that through.
	cfg, err := os.ReadFile(r2.Config)
	if err != nil {
		t.Fatal(err)
	}
	if out, errs, code := setFirewall(t, r2, string(cfg), "firewall:\n  inbound:\n    - {port: any, proto: any, host: any}\n"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errs)
	}
	Eventually(t, 5*time.Second, "r2's rules without local_cidr drop routed traffic", func() error {
		if w1.Ping(t.Context(), lanHost) == nil {
			return fmt.Errorf("w1 still reaches the LAN host")
		}
		return nil
	})
	if out, errs, code := setFirewall(t, r2, string(cfg), "firewall:\n  inbound:\n    - {port: any, proto: any, host: any}\n"+
		"    - {port: any, proto: icmp, host: w1, local_cidr: "+lan+"}\n"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errs)
	}
	Eventually(t, 5*time.Second, "a rule naming the prefix lets w1's ping through r2", func() error {
		return w1.Ping(t.Context(), lanHost)
	})

	// Withdrawn: r2's certificate is reissued without the prefix, nobody
	// carries it, w1 no longer reaches the LAN.
	if !certHolds(t, r2, lan) {
		t.Fatalf("r2's Nebula certificate does not hold %s while approved", lan)
	}
	c1.MustCtl(t, "routes", "withdraw", "r2", lan)
	Eventually(t, 10*time.Second, "r2's reissued certificate no longer holds the prefix", func() error {
		if certHolds(t, r2, lan) {
			return fmt.Errorf("still held")
		}
		if w1.Ping(t.Context(), lanHost) == nil {
			return fmt.Errorf("w1 still reaches the LAN host")
		}
		return nil
	})
	if c := carrierOn(t, c1, lan); c != "" {
		t.Errorf("withdrawn, %s is still carried by %q", lan, c)
	}
}

// certHolds reports whether nd's Nebula certificate holds prefix as an
// unsafe network.
func certHolds(t *testing.T, nd *Node, prefix string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nd.Dir, "identity", "nebula", "host.crt"))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := cert.UnmarshalCertificateFromPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(c.UnsafeNetworks(), func(p netip.Prefix) bool { return p.String() == prefix })
}

// internetHost is "the internet": a host behind a gateway on the hub.
const internetHost = "203.0.113.10"

// addInternet puts a gateway host on n's hub with a second link to an
// "internet" namespace holding internetHost, and points every host in
// via's default route at the gateway. It returns the internet host, and
// an HTTP server there that answers with the source address it saw.
func addInternet(t *testing.T, n *Net, via ...*Host) *Host {
	t.Helper()
	gw := n.AddHost("gw")
	inet := &Host{Net: n, Name: n.prefix + "-inet", IP: internetHost}
	run(t, "ip", "netns", "add", inet.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", inet.Name).Run() })
	n.in(inet.Name, "ip", "link", "set", "lo", "up")
	run(t, "ip", "link", "add", n.prefix+"gi", "type", "veth", "peer", "name", "eth0", "netns", inet.Name)
	run(t, "ip", "link", "set", n.prefix+"gi", "netns", gw.Name)
	n.in(gw.Name, "ip", "addr", "add", "203.0.113.1/24", "dev", n.prefix+"gi")
	n.in(gw.Name, "ip", "link", "set", n.prefix+"gi", "up")
	n.in(gw.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	n.in(inet.Name, "ip", "addr", "add", internetHost+"/24", "dev", "eth0")
	n.in(inet.Name, "ip", "link", "set", "eth0", "up")
	n.in(inet.Name, "ip", "route", "add", "default", "via", "203.0.113.1")
	for _, h := range via {
		n.in(h.Name, "ip", "route", "add", "default", "via", gw.IP)
	}
	ln := inet.ListenTCP(t, "8080")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return inet
}

// browse fetches the internet host's page from h: the address the
// internet saw h's request come from.
func browse(ctx context.Context, h *Host) (string, error) {
	out, err := h.Exec(ctx, "curl", "-sS", "--max-time", "3", "http://"+internetHost+":8080/").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("curl from %s: %v: %s", h.Name, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// kernelRoutes is h's IPv4 routes in every table and its rules: what
// exit off must restore exactly.
func kernelRoutes(t *testing.T, h *Host) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{{"-4", "route", "show", "table", "all"}, {"-4", "rule"}, {"-6", "rule"}} {
		out, err := h.Exec(t.Context(), "ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
		b.Write(out)
	}
	return b.String()
}

// meshdPorts are the underlay ports meshd's own traffic uses: Nebula,
// the control API, STUN.
var meshdPorts = []string{".4242", ".7300", ".3478"}

// TestExitNode (issue 33 item 3): c1 (control), e1 (exit node), w1; a
// gateway on the hub leads to "the internet" (203.0.113.10, an HTTP
// server that answers with the address it saw), and w1's and e1's
// default routes go through it.
//   - before: w1 browses out directly (the internet sees w1);
//   - `exit use e1` before e1 is approved is refused (ExitNotApproved);
//   - e1 advertises --exit, c1 approves, w1 `exit use e1`: the internet
//     sees e1 (masqueraded there), and a capture on w1's underlay while it
//     browses and pings out shows only meshd's own packets (Nebula UDP,
//     the control API, STUN) and nothing to or from the internet;
//   - `exit off`: w1's routes and rules are exactly what they were, and
//     the internet sees w1 again.
func TestExitNode(t *testing.T) {
	n := NewNet(t)
	c1 := n.NewNode("c1")
	c1.Start(t)
	c1.MustCtl(t, "init", "--cluster", "e2e")
	e1, w1 := n.NewNode("e1"), n.NewNode("w1")
	for _, nd := range []*Node{e1, w1} {
		nd.Start(t)
		nd.MustCtl(t, "join", c1.Admit(t, nd.NodeName))
	}
	addInternet(t, n, e1.Host, w1.Host)
	if from, err := browse(t.Context(), w1.Host); err != nil || from != w1.IP {
		t.Fatalf("before: the internet sees %q (%v), want w1's %s", from, err, w1.IP)
	}
	before := kernelRoutes(t, w1.Host)

	if _, errs, code := w1.Ctl(t.Context(), "exit", "use", "e1"); code == 0 || !strings.Contains(errs, string(codes.ExitNotApproved)) {
		t.Fatalf("exit use before approval: exit %d, want %s\n%s", code, codes.ExitNotApproved, errs)
	}
	e1.MustCtl(t, "routes", "advertise", "--exit")
	c1.MustCtl(t, "routes", "approve", "e1", "0.0.0.0/0")
	Eventually(t, 30*time.Second, "w1 uses e1 as its exit node", func() error {
		_, errs, code := w1.Ctl(t.Context(), "exit", "use", "e1")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errs)
		}
		from, err := browse(t.Context(), w1.Host)
		if err != nil {
			return err
		}
		if from != e1.IP {
			return fmt.Errorf("the internet sees %s, want e1's %s", from, e1.IP)
		}
		return nil
	})

	// The leak capture: browse and ping out while tcpdump watches w1's
	// underlay (written to a file, read back once it stopped).
	lines := leakCapture(t, w1.Host, func() {
		for i := 0; i < 5; i++ {
			if from, err := browse(t.Context(), w1.Host); err != nil || from != e1.IP {
				t.Fatalf("browse %d through e1: %q %v", i, from, err)
			}
			if err := w1.Ping(t.Context(), internetHost); err != nil {
				t.Fatalf("ping %d through e1: %v", i, err)
			}
		}
	})
	if len(lines) == 0 {
		t.Fatal("the capture saw nothing: it cannot show a leak")
	}
	for _, l := range lines {
		own := slices.ContainsFunc(meshdPorts, func(p string) bool { return strings.Contains(l, p+" ") || strings.Contains(l, p+":") })
		if strings.Contains(l, internetHost) || !own {
			t.Errorf("a packet on w1's underlay that is not meshd's own: %s", l)
		}
	}
	t.Logf("leak capture: %d packets on w1's underlay, all meshd's own", len(lines))

	// Fail closed: the exit node's approval withdrawn, w1's traffic for
	// the internet is dropped, not sent out on its underlay.
	c1.MustCtl(t, "routes", "withdraw", "e1", "0.0.0.0/0")
	Eventually(t, 10*time.Second, "w1's exit node no longer approved, as w1 sees it", func() error {
		r := routeRows(t, w1)
		if r.Exit == nil || !strings.Contains(r.Exit.Error, "dropped") {
			return fmt.Errorf("exit %+v", r.Exit)
		}
		return nil
	})
	// Its overlay follows at its next reload (the reload gap, at most 1 s).
	Eventually(t, 5*time.Second, "w1's traffic for the internet dropped", func() error {
		if from, err := browse(t.Context(), w1.Host); err == nil {
			return fmt.Errorf("w1 still browses out, seen as %s", from)
		}
		return nil
	})
	if out, err := w1.Exec(t.Context(), "ip", "-4", "rule").CombinedOutput(); err != nil || !strings.Contains(string(out), "lookup 52742") {
		t.Fatalf("the exit routing is gone with the exit node's approval (%v): the default route would leave on the underlay\n%s", err, out)
	}

	w1.MustCtl(t, "exit", "off")
	if after := kernelRoutes(t, w1.Host); after != before {
		t.Errorf("exit off left the routes changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if from, err := browse(t.Context(), w1.Host); err != nil || from != w1.IP {
		t.Errorf("after exit off the internet sees %q (%v), want w1's %s", from, err, w1.IP)
	}
}

// leakCapture runs tcpdump on h's eth0 (IPv4 only) while traffic runs,
// and returns the packets it saw, one line each.
func leakCapture(t *testing.T, h *Host, traffic func()) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "underlay.pcap")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	capture := h.Exec(ctx, "tcpdump", "-Z", "root", "--immediate-mode", "-i", "eth0", "-n", "-U", "-w", file, "ip")
	errPipe, err := capture.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errPipe)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "listening on") {
				close(listening)
				said = true
			}
		}
		if !said {
			close(listening)
		}
	}()
	select {
	case <-listening:
	case <-ctx.Done():
		t.Fatal("tcpdump did not start listening")
	}
	traffic()
	_ = capture.Process.Signal(syscall.SIGINT)
	_ = capture.Wait()
	out, err := exec.CommandContext(t.Context(), "tcpdump", "-r", file, "-n", "-q").Output()
	if err != nil {
		t.Fatalf("tcpdump -r: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
