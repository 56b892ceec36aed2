//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// Issue 30: the cluster's names, used as an operator without
// systemd-resolved uses them. Each namespace's /etc/resolv.conf names only
// its own meshd's loopback DNS address (dns.loopback), and the host's own
// tools, glibc's resolver (getent, ping) and dig, resolve NAME.CLUSTER.mesh
// through it. agenttest.TestNames covers the same promises in-process;
// this runs them on the real binaries, kernel TUN and glibc.

const (
	// namesJoinBound: from `meshctl join` exiting 0 to the new node's
	// name resolving, and the node answering ping by that name, on every
	// node (issue 30).
	namesJoinBound = time.Second
	// namesRemoveBound: from `meshctl remove` returning to the removed
	// node's name being NXDOMAIN on every remaining node (issue 30).
	namesRemoveBound = 2 * time.Second
	// nodeDNS is dns.loopback's default: where each node's resolver points.
	nodeDNS = "127.0.77.53"
	// namesDomain is the zone of the suite's cluster ("e2e", see cluster)
	// under dns.domain's default.
	namesDomain = "e2e.mesh"
)

// resolvConf is each node's /etc/resolv.conf: its own meshd and nothing
// else, so no answer can come from anywhere but meshd.
const resolvConf = "# e2e TestNames: this namespace resolves through its own meshd (dns.loopback)\nnameserver " + nodeDNS + "\n"

// requireDig fails the test when dig is missing: as root (the only way
// this suite runs, as CI does) scripts/install-deps.sh installs it.
func requireDig(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatal("dig not found: run scripts/install-deps.sh (it installs Debian's bind9-dnsutils)")
	}
}

// useNodeDNS points h's resolver at its own meshd, as an operator
// without systemd-resolved does (meshd's status hint says so; meshd never
// writes resolv.conf): `ip netns exec NS` bind-mounts
// /etc/netns/NS/resolv.conf over /etc/resolv.conf in a mount namespace of
// the command's own, and every command of the suite in a host's namespace
// (Host.Exec, meshd itself) runs through it. Setns alone (inNetns) does
// not see the file. It is removed when the test ends.
func useNodeDNS(t testing.TB, h *Host) {
	t.Helper()
	if _, err := os.Stat("/etc/netns"); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { _ = os.Remove("/etc/netns") }) // runs last; only if nothing else is in it
	}
	dir := filepath.Join("/etc/netns", h.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolvConf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := h.Exec(t.Context(), "cat", "/etc/resolv.conf").Output()
	if err != nil || string(out) != resolvConf {
		t.Fatalf("%s's /etc/resolv.conf is not the one written to %s: %q %v", h.Name, dir, out, err)
	}
}

// getentHosts is the address glibc's resolver gives name in h's
// namespace (`getent hosts name`); not found is exit status 2.
func getentHosts(ctx context.Context, h *Host, name string) (string, error) {
	out, err := h.Exec(ctx, "getent", "hosts", name).Output()
	if err != nil {
		return "", fmt.Errorf("getent hosts %s on %s: %w", name, h.Name, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("getent hosts %s on %s: %q", name, h.Name, out)
	}
	return f[0], nil
}

// pingName is `ping -c1 -W1 name` in h's namespace: one ICMP echo to the
// address glibc gives name, answered within a second.
func pingName(ctx context.Context, h *Host, name string) error {
	out, err := h.Exec(ctx, "ping", "-c1", "-W1", "-q", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s on %s: %v: %s", name, h.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// digReply is what dig printed of one answer.
type digReply struct {
	Status  string   // the header's status: NOERROR, NXDOMAIN, REFUSED
	Answers []string // the answer section, one record a line, fields joined by one space
	Server  string   // who answered: "127.0.77.53#53(127.0.77.53) (UDP)"
}

// dig runs dig in h's namespace with one try of at most a second; with
// no @server it asks the resolv.conf's server. An error is dig getting no
// answer (exit 9) or failing otherwise.
func dig(ctx context.Context, h *Host, args ...string) (digReply, error) {
	args = append([]string{"+time=1", "+tries=1"}, args...)
	out, err := h.Exec(ctx, "dig", args...).CombinedOutput()
	if err != nil {
		return digReply{}, fmt.Errorf("dig %s on %s: %v: %s", strings.Join(args, " "), h.Name, err, bytes.TrimSpace(out))
	}
	var r digReply
	inAnswer := false
	for line := range strings.SplitSeq(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, ";; ->>HEADER<<-"):
			if _, s, ok := strings.Cut(line, "status: "); ok {
				r.Status, _, _ = strings.Cut(s, ",")
			}
		case line == ";; ANSWER SECTION:":
			inAnswer = true
		case inAnswer && line == "":
			inAnswer = false
		case inAnswer:
			r.Answers = append(r.Answers, strings.Join(strings.Fields(line), " "))
		case strings.HasPrefix(line, ";; SERVER: "):
			r.Server = strings.TrimPrefix(line, ";; SERVER: ")
		}
	}
	if r.Status == "" {
		return r, fmt.Errorf("dig %s on %s: no header in %s", strings.Join(args, " "), h.Name, out)
	}
	return r, nil
}

// fromNodeDNS checks that r came from h's own meshd on its loopback address.
func fromNodeDNS(r digReply) error {
	if !strings.HasPrefix(r.Server, nodeDNS+"#53(") {
		return fmt.Errorf("answered by %q, not %s#53", r.Server, nodeDNS)
	}
	return nil
}

// nameTiming is how long after a join (or a removal) one node took.
type nameTiming struct {
	node             *Node
	resolved, pinged time.Duration // after a join
	gone             time.Duration // after a removal
	addr             string        // what glibc resolved the name to
	polls            int           // checks run until the first that passed (each runs its commands through ip netns exec)
	err              error
}

// reachableByName waits on every node at once for glibc to resolve name
// (getent hosts) and then for `ping -c1 -W1 name` to be answered, all
// before from+bound: each command is killed at that deadline.
func reachableByName(ctx context.Context, nodes []*Node, name string, from time.Time, bound time.Duration) []nameTiming {
	deadline := from.Add(bound)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	out := make([]nameTiming, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Go(func() {
			tm := nameTiming{node: nd}
			defer func() { out[i] = tm }()
			if _, tm.err = waitFor(ctx, time.Until(deadline), func() (err error) {
				tm.polls++
				tm.addr, err = getentHosts(ctx, nd.Host, name)
				return err
			}); tm.err != nil {
				return
			}
			tm.resolved = time.Since(from)
			if _, tm.err = waitFor(ctx, time.Until(deadline), func() error { return pingName(ctx, nd.Host, name) }); tm.err == nil {
				tm.pinged = time.Since(from)
			}
		})
	}
	wg.Wait()
	return out
}

// goneByName waits on every node at once for name and its PTR to be gone:
// getent hosts not found (exit 2) and dig NXDOMAIN with no answer for the
// name and for addr's reverse name, before from+bound.
func goneByName(ctx context.Context, nodes []*Node, name, addr string, from time.Time, bound time.Duration) []nameTiming {
	deadline := from.Add(bound)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	out := make([]nameTiming, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Go(func() {
			tm := nameTiming{node: nd}
			_, tm.err = waitFor(ctx, time.Until(deadline), func() error {
				tm.polls++
				a, err := getentHosts(ctx, nd.Host, name)
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 2 {
					return fmt.Errorf("getent hosts %s on %s: %q %v, want not found (exit 2)", name, nd.NodeName, a, err)
				}
				for _, q := range [][]string{{name, "A"}, {"-x", addr}} {
					r, err := dig(ctx, nd.Host, q...)
					if err != nil {
						return err
					}
					if r.Status != "NXDOMAIN" || len(r.Answers) != 0 {
						return fmt.Errorf("dig %v on %s: %s %v, want NXDOMAIN", q, nd.NodeName, r.Status, r.Answers)
					}
				}
				return nil
			})
			tm.gone = time.Since(from)
			out[i] = tm
		})
	}
	wg.Wait()
	return out
}

// TestNames (issue 30): an origin and three workers, each namespace's
// resolver pointed at its own meshd's loopback address. After each join
// exits 0 the new node's NAME.e2e.mesh resolves (getent hosts) and
// answers `ping -c1 -W1` by name on every node within 1 s; dig gives a
// member's PTR, its AAAA and IPv6 PTR (the cluster is dual-stack by
// default, issue 34), and REFUSED, with no answer, for a name outside the zone,
// always from the node's own meshd; nothing answers DNS on the underlay
// address while the overlay address answers; `meshctl nodes` has every
// DNS name (json and wide), `meshctl status` both listening addresses,
// `meshctl ping` takes a DNS name; after `meshctl remove w2` returns, w2
// and its PTR are NXDOMAIN on every remaining node within 2 s, and the
// removed w2 gets no answer from any node's overlay address; no node's
// resolv.conf was touched.
//
// Subtests: fast (the suite's timers) and lan (meshd's defaults: gossip's
// LAN timers and raft's own timing, what operators run; the bounds must
// hold there too).
func TestNames(t *testing.T) {
	requireDig(t)
	for _, timers := range []string{"fast", "lan"} {
		t.Run(timers, func(t *testing.T) { testNames(t, timers) })
	}
}

func testNames(t *testing.T, timers string) {
	n := NewNet(t)
	n.Timers, n.DefaultRaft = timers, timers == "lan"
	hostConf, _ := os.ReadFile("/etc/resolv.conf")
	origin := n.NewNode("origin")
	useNodeDNS(t, origin.Host)
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	nodes := []*Node{origin}
	fqdn := func(name string) string { return name + "." + namesDomain }

	// Each join: the new name resolves and pings by name everywhere
	// within namesJoinBound of join exiting 0.
	for _, name := range []string{"w1", "w2", "w3"} {
		w := n.NewNode(name)
		useNodeDNS(t, w.Host)
		w.Start(t)
		tok := origin.Admit(t, name)
		w.MustCtl(t, "join", tok)
		joined := time.Now()
		nodes = append(nodes, w)
		timings := reachableByName(t.Context(), nodes, fqdn(name), joined, namesJoinBound)
		want, want6 := overlayIPs(t, origin)[name], ""
		for _, row := range origin.Nodes(t) {
			if row.Name == name {
				want6 = row.OverlayIP6
			}
		}
		for _, tm := range timings {
			switch {
			case tm.err != nil && tm.resolved == 0:
				t.Errorf("%s: %s not resolved within %s of join exiting 0: %v", tm.node.NodeName, fqdn(name), namesJoinBound, tm.err)
			case tm.err != nil:
				t.Errorf("%s: %s resolved after %s but not pinged by name within %s of join exiting 0: %v",
					tm.node.NodeName, fqdn(name), tm.resolved.Round(time.Millisecond), namesJoinBound, tm.err)
			case tm.addr != want && tm.addr != want6: // glibc prefers the AAAA of a dual-stack cluster (issue 34)
				t.Errorf("%s: %s resolved to %s, want its overlay IP %s or %s", tm.node.NodeName, fqdn(name), tm.addr, want, want6)
			default:
				t.Logf("join %s exited 0; on %s: resolved %s after (getent %d times), pinged by name %s after",
					name, tm.node.NodeName, tm.resolved.Round(time.Millisecond), tm.polls, tm.pinged.Round(time.Millisecond))
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	ips := overlayIPs(t, origin)
	ips6 := map[string]string{}
	for _, row := range origin.Nodes(t) {
		ips6[row.Name] = row.OverlayIP6
	}

	// dig, through each node's resolv.conf: the PTR of w2's address, and
	// REFUSED with no answer for a name outside the zone, both from the
	// node's own meshd.
	for _, nd := range nodes {
		r, err := dig(t.Context(), nd.Host, "-x", ips["w2"])
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "NOERROR" || !slices.Equal(r.Answers, []string{reverse(ips["w2"]) + " 1 IN PTR " + fqdn("w2") + "."}) {
			t.Errorf("%s: dig -x %s: %s %q, want w2's PTR", nd.NodeName, ips["w2"], r.Status, r.Answers)
		}
		if err := fromNodeDNS(r); err != nil {
			t.Errorf("%s: dig -x %s: %v", nd.NodeName, ips["w2"], err)
		}
		// Issue 34: the cluster is dual-stack by default; w2's AAAA is
		// its IPv6 overlay address, and that address's PTR is w2.
		r, err = dig(t.Context(), nd.Host, fqdn("w2"), "AAAA")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "NOERROR" || !slices.Equal(r.Answers, []string{fqdn("w2") + ". 1 IN AAAA " + ips6["w2"]}) {
			t.Errorf("%s: dig %s AAAA: %s %q, want w2's IPv6 overlay address %s", nd.NodeName, fqdn("w2"), r.Status, r.Answers, ips6["w2"])
		}
		r, err = dig(t.Context(), nd.Host, "-x", ips6["w2"])
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "NOERROR" || len(r.Answers) != 1 || !strings.HasSuffix(r.Answers[0], ".ip6.arpa. 1 IN PTR "+fqdn("w2")+".") {
			t.Errorf("%s: dig -x %s: %s %q, want w2's PTR", nd.NodeName, ips6["w2"], r.Status, r.Answers)
		}
		r, err = dig(t.Context(), nd.Host, "example.com", "A")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "REFUSED" || len(r.Answers) != 0 {
			t.Errorf("%s: dig example.com: %s %q, want REFUSED with no answer (never forwarded)", nd.NodeName, r.Status, r.Answers)
		}
		if err := fromNodeDNS(r); err != nil {
			t.Errorf("%s: dig example.com: %v", nd.NodeName, err)
		}
	}

	// Served on the overlay address, never on the underlay: from the next
	// node's namespace, a query to a node's overlay address is answered
	// and one to its underlay address (UDP and TCP) is not within 1 s.
	for i, nd := range nodes {
		from := nodes[(i+1)%len(nodes)]
		r, err := dig(t.Context(), from.Host, "@"+ips[nd.NodeName], fqdn("w2"), "A")
		if err != nil || r.Status != "NOERROR" || !slices.Equal(r.Answers, []string{fqdn("w2") + ". 1 IN A " + ips["w2"]}) {
			t.Errorf("%s asking %s on its overlay address %s: %+v %v, want w2's A", from.NodeName, nd.NodeName, ips[nd.NodeName], r, err)
		}
		for _, proto := range []string{"+notcp", "+tcp"} {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			start := time.Now()
			r, err := dig(ctx, from.Host, proto, "@"+nd.IP, fqdn("w2"), "A")
			cancel()
			if err == nil {
				t.Errorf("%s asking %s on its underlay address %s (%s) got an answer: %+v", from.NodeName, nd.NodeName, nd.IP, proto, r)
			} else if took := time.Since(start); took > 3*time.Second {
				t.Errorf("%s asking %s's underlay address (%s): dig took %s with +time=1", from.NodeName, nd.NodeName, proto, took)
			}
		}
	}

	// meshctl: every active node's DNS name (json on the origin and on a
	// worker, the wide table), both listening addresses, ping by DNS name.
	for _, nd := range []*Node{origin, nodes[1]} {
		for _, row := range nd.Nodes(t) {
			if row.DNSName != fqdn(row.Name) {
				t.Errorf("%s: nodes -o json: %s's dns_name %q, want %q", nd.NodeName, row.Name, row.DNSName, fqdn(row.Name))
			}
		}
	}
	wide := origin.MustCtl(t, "nodes", "-o", "wide")
	if !strings.Contains(wide, "DNS NAME") || !strings.Contains(wide, fqdn("w3")) {
		t.Errorf("nodes -o wide has no DNS NAME column with w3's name:\n%s", wide)
	}
	for _, nd := range nodes {
		var st apitype.Status
		if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil {
			t.Fatal(err)
		}
		want := []string{net.JoinHostPort(ips[nd.NodeName], "53"), net.JoinHostPort(nodeDNS, "53")}
		if st.DNS == nil {
			t.Errorf("%s: status has no dns block", nd.NodeName)
			continue
		}
		if got := slices.Sorted(slices.Values(st.DNS.Listening)); !slices.Equal(got, slices.Sorted(slices.Values(want))) ||
			st.DNS.Domain != namesDomain || st.DNS.Names != len(nodes) || len(st.DNS.NotServed) != 0 || st.DNS.Loopback != want[1] {
			t.Errorf("%s: status dns %+v, want listening on %v, domain %s, %d names", nd.NodeName, *st.DNS, want, namesDomain, len(nodes))
		}
	}
	var pong struct {
		Name     string
		Answered int
	}
	if err := nodes[3].CtlJSON(t.Context(), &pong, "ping", "-c", "1", fqdn("w1")); err != nil || pong.Name != "w1" || pong.Answered != 1 {
		t.Errorf("w3: meshctl ping %s: %+v %v, want w1 answering", fqdn("w1"), pong, err)
	}

	rest := []*Node{origin, nodes[1], nodes[3]}
	// The removal: w2 (still running) NXDOMAIN everywhere else within
	// namesRemoveBound of remove returning.
	// Before: w2, a member, is answered on every other node's overlay
	// address (what the check after the removal must lose).
	for _, nd := range rest {
		if r, err := dig(t.Context(), nodes[2].Host, "@"+ips[nd.NodeName], fqdn("w1"), "A"); err != nil || r.Status != "NOERROR" {
			t.Fatalf("member w2 asking %s on its overlay address: %+v %v, want an answer", nd.NodeName, r, err)
		}
	}
	start := time.Now()
	origin.MustCtl(t, "remove", "w2")
	returned := time.Now()
	for _, tm := range goneByName(t.Context(), rest, fqdn("w2"), ips["w2"], returned, namesRemoveBound) {
		if tm.err != nil {
			t.Errorf("%s: w2 not gone within %s of remove returning: %v", tm.node.NodeName, namesRemoveBound, tm.err)
			continue
		}
		t.Logf("remove w2 returned after %s; on %s: NXDOMAIN %s after (check %d, each getent and two digs)",
			returned.Sub(start).Round(time.Millisecond), tm.node.NodeName, tm.gone.Round(time.Millisecond), tm.polls)
	}

	// The removed w2, still running with its certificates, asks the
	// others' DNS on their overlay addresses (it could before): Nebula
	// refuses its blocklisted certificate, so no answer comes, UDP or TCP.
	for _, nd := range rest {
		for _, proto := range []string{"+notcp", "+tcp"} {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			r, err := dig(ctx, nodes[2].Host, proto, "@"+ips[nd.NodeName], fqdn("w1"), "A")
			cancel()
			if err == nil {
				t.Errorf("removed w2 asking %s on its overlay address %s (%s) got an answer: %+v", nd.NodeName, ips[nd.NodeName], proto, r)
			}
		}
	}

	// meshd left every resolv.conf alone.
	for _, nd := range nodes {
		if b, err := os.ReadFile(filepath.Join("/etc/netns", nd.Name, "resolv.conf")); err != nil || string(b) != resolvConf {
			t.Errorf("%s's resolv.conf changed: %q %v", nd.NodeName, b, err)
		}
	}
	if b, _ := os.ReadFile("/etc/resolv.conf"); !bytes.Equal(b, hostConf) {
		t.Errorf("the machine's /etc/resolv.conf changed during the test: %q, was %q", b, hostConf)
	}
}

// reverse is ip's in-addr.arpa name with its final dot.
func reverse(ip string) string {
	f := strings.Split(ip, ".")
	slices.Reverse(f)
	return strings.Join(f, ".") + ".in-addr.arpa."
}
