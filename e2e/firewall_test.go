//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/codes"
)

// tcpConnect opens a TCP connection from h's namespace to ip:port (bash's
// /dev/tcp, so the kernel's own stack and the TUN device carry it) and
// reports whether it was accepted within a second.
func tcpConnect(ctx context.Context, h *Host, ip string, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := h.Exec(ctx, "timeout", "1", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", ip, port)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tcp %s:%d from %s: %v %s", ip, port, h.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setFirewall rewrites nd's config file with the given firewall section
// (and other lines), keeping what NewNode wrote, and runs meshctl reload.
func setFirewall(t *testing.T, nd *Node, base, extra string) (string, string, int) {
	t.Helper()
	if err := os.WriteFile(nd.Config, []byte(base+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return nd.Ctl(t.Context(), "reload")
}

// closedPort is a port nobody listens on: a probe to it (meshctl ping
// --port) is answered with a reset when the firewall lets it through.
const closedPort = "7999"

// reaches is whether from's probe to w1's closed port is answered.
func reaches(ctx context.Context, from *Node) error {
	out, errs, code := from.Ctl(ctx, "ping", "w1", "-c", "1", "-W", "500ms", "--port", closedPort)
	if code != 0 {
		return fmt.Errorf("%s pings w1:%s: exit %d\n%s%s", from.NodeName, closedPort, code, out, errs)
	}
	return nil
}

// TestOverlayFirewall (issue 14 item 9), on kernel TUN devices in network
// namespaces: origin (control), w1 (worker, bind_addr 0.0.0.0) and w2
// (worker, admitted with --group db).
//   - w2's Nebula certificate carries [worker db];
//   - meshctl ping prints an RTT per probe to a live node, and the path
//     (direct, the node's underlay address and Nebula port);
//   - w1's inbound rule allowing only group control on TCP 7999 lets the
//     origin's probes (meshctl ping --port) through and drops w2's, after
//     a reload, without restarting meshd; the MTU set in the same reload
//     reaches the TUN device; gossip's port stays open to both (meshd's
//     own rule: gossip rides the overlay);
//   - a reload to a rule for group db flips both;
//   - a bad rule is refused with its code and changes nothing;
//   - meshctl ping of a stopped node ends with PingLost, of an unknown one
//     with NodeUnknown.
func TestOverlayFirewall(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	w1 := n.NewNode("w1")
	cfg, err := os.ReadFile(w1.Config)
	if err != nil {
		t.Fatal(err)
	}
	w1Base := strings.Replace(string(cfg), "bind_addr: "+w1.IP+"\n", "bind_addr: 0.0.0.0\n", 1)
	if w1Base == string(cfg) {
		t.Fatalf("no bind_addr line in %s", cfg)
	}
	// w1 in the gossip pool (workers are out of it by default): its
	// gossip port is the service the rules below open and close, and
	// meshd keeps it open to members whatever an operator's rule says.
	w1Base += "gossip_pool: true\n"
	if err := os.WriteFile(w1.Config, []byte(w1Base), 0o600); err != nil {
		t.Fatal(err)
	}
	w1.Start(t)
	w1.MustCtl(t, "join", origin.Admit(t, "w1"))
	w2 := n.NewNode("w2")
	w2.Start(t)
	w2.MustCtl(t, "join", origin.Admit(t, "w2", "--group", "db"))
	ips := overlayIPs(t, origin)

	crtPEM, err := os.ReadFile(filepath.Join(w2.Dir, "identity", "nebula", "host.crt"))
	if err != nil {
		t.Fatal(err)
	}
	crt, _, err := cert.UnmarshalCertificateFromPEM(crtPEM)
	if err != nil || !slices.Equal(crt.Groups(), []string{"worker", "db"}) {
		t.Fatalf("w2's Nebula certificate groups %v (%v), want [worker db]", crt.Groups(), err)
	}

	// meshctl ping: one line with an RTT and the tunnel's path per probe
	// (direct, to the origin's underlay address and Nebula port), and the
	// summary.
	answer := regexp.MustCompile(`(?m)^answer from origin \(` + regexp.QuoteMeta(ips["origin"]) + `\): probe=\d time=\d+\.\d{3} ms \((accepted|refused)\), direct ` +
		regexp.QuoteMeta(origin.IP) + `:4242$`)
	Eventually(t, 10*time.Second, "w2 pings origin", func() error {
		out, errs, code := w2.Ctl(t.Context(), "ping", "origin", "-c", "3", "-i", "100ms")
		if code != 0 || len(answer.FindAllString(out, -1)) != 3 || !strings.Contains(out, "3 probes, 3 answered, 0% lost, rtt min/avg/max = ") {
			return fmt.Errorf("exit %d\n%s%s", code, out, errs)
		}
		t.Logf("meshctl ping:\n%s", out)
		return nil
	})

	// any/any (the default): both reach w1's gossip port over the overlay.
	for _, h := range []*Node{origin, w2} {
		Eventually(t, 10*time.Second, h.NodeName+" connects to w1:7946 under any/any", func() error {
			return tcpConnect(t.Context(), h.Host, ips["w1"], 7946)
		})
	}
	pid := w1.cmd.Process.Pid

	out, errs, code := setFirewall(t, w1, w1Base, "overlay_mtu: 1400\nfirewall:\n  inbound:\n"+
		"    - {port: "+closedPort+", proto: tcp, group: control}\n    - {port: any, proto: icmp, host: any}\n")
	if code != 0 || strings.Contains(errs, "X") {
		t.Fatalf("reload with group control: exit %d\n%s%s", code, out, errs)
	}
	Eventually(t, 5*time.Second, "origin (control) reaches w1:"+closedPort, func() error {
		return reaches(t.Context(), origin)
	})
	Eventually(t, 5*time.Second, "w2 (worker) is dropped at w1:"+closedPort, func() error {
		if reaches(t.Context(), w2) == nil {
			return fmt.Errorf("w2 still reaches it")
		}
		return nil
	})
	if err := tcpConnect(t.Context(), w2.Host, ips["w1"], 7946); err != nil {
		t.Errorf("gossip's port is closed to w2 by an operator's rule: %v", err)
	}
	if err := w2.Ping(t.Context(), ips["w1"]); err != nil {
		t.Errorf("icmp is allowed to anyone: %v", err)
	}
	link, err := w1.Exec(t.Context(), "ip", "-o", "link", "show", "meshd0").CombinedOutput()
	if err != nil || !strings.Contains(string(link), " mtu 1400 ") {
		t.Errorf("w1's meshd0 after the reload: %s %v, want mtu 1400", link, err)
	}

	out, errs, code = setFirewall(t, w1, w1Base, "firewall:\n  inbound:\n    - {port: "+closedPort+", proto: tcp, group: db}\n")
	if code != 0 || strings.Contains(errs, "X") {
		t.Fatalf("reload with group db: exit %d\n%s%s", code, out, errs)
	}
	Eventually(t, 5*time.Second, "w2 (group db) reaches w1:"+closedPort, func() error {
		return reaches(t.Context(), w2)
	})
	Eventually(t, 5*time.Second, "origin (control) is dropped at w1:"+closedPort, func() error {
		if reaches(t.Context(), origin) == nil {
			return fmt.Errorf("origin still reaches it")
		}
		return nil
	})

	_, errs, code = setFirewall(t, w1, w1Base, "firewall:\n  inbound:\n    - {port: "+closedPort+", proto: sctp, group: db}\n")
	// The config checker lists the rule under ReloadRefused, with its code.
	if code != 1 || !strings.HasPrefix(errs, string(codes.ReloadRefused)+": ") || !strings.Contains(errs, string(codes.FirewallRule)) {
		t.Fatalf("reload with a bad rule: exit %d\n%s, want %s naming %s", code, errs, codes.ReloadRefused, codes.FirewallRule)
	}
	if err := reaches(t.Context(), w2); err != nil {
		t.Errorf("a refused reload changed the firewall: %v", err)
	}
	if w1.cmd == nil || w1.cmd.Process.Pid != pid {
		t.Errorf("w1's meshd was restarted")
	}

	// A stopped node: every probe lost, PingLost; an unknown name: NodeUnknown.
	w1.Stop(t)
	out, errs, code = origin.Ctl(t.Context(), "ping", "w1", "-c", "2", "-i", "100ms", "-W", "300ms")
	if code != 1 || !strings.HasPrefix(errs, string(codes.PingLost)+": ") || !strings.Contains(out, "2 probes, 0 answered, 100% lost") {
		t.Errorf("ping a stopped node: exit %d\n%s%s, want %s", code, out, errs, codes.PingLost)
	}
	_, errs, code = origin.Ctl(t.Context(), "ping", "nobody", "-c", "1")
	if code != 1 || !strings.HasPrefix(errs, string(codes.NodeUnknown)+": ") {
		t.Errorf("ping an unknown node: exit %d\n%s, want %s", code, errs, codes.NodeUnknown)
	}
}
