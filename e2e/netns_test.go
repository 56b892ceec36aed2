//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Net is a test network: a hub namespace holding a bridge, and one
// namespace per host attached to it by a veth pair. Underlay addresses are
// 10.99.0.<host>/24 (fd99::<host>/64 on a net from NewNetIPv6), only
// ever inside these namespaces.
type Net struct {
	t      testing.TB
	prefix string // unique per test: namespace and link names start with it
	subnet int
	// ipv6 makes the underlay IPv6 only (NewNetIPv6): each host's eth0
	// gets fd<subnet>::<host>/64 and no IPv4 address at all.
	ipv6  bool
	hub   string
	hosts []*Host
	delay *delayBridge // set by Delay; it replaces br0 from then on
	// Timers is the meshd `timers` setting of the nodes started on this
	// net: "fast" (the default here) or "lan" (the production default).
	Timers string
	// DefaultRaft leaves raft's timing at meshd's defaults (1 s heartbeat
	// and election timeouts, 500 ms lease) instead of the suite's 300 ms.
	DefaultRaft bool
	// ExtraConfig is appended to the meshd config of every node made on
	// this net (for example "metrics_addr: 127.0.0.1:9464\n").
	ExtraConfig string
	// WorkerConfig is appended to the config of the workers formCluster
	// makes (BenchmarkIdleAgainstN's "gossip_pool: true\n" with MESHD_IDLE_GOSSIP_POOL=true).
	WorkerConfig string
	// Unpinned leaves bind_addr and advertise_addr out of the configs of
	// nodes made on this net (NewNode): they keep meshd's defaults, all
	// addresses and the underlay chosen by route (mesh.ChooseUnderlay).
	Unpinned bool
	// ProfileDir, when set, has every node made on this net write its CPU
	// profile to ProfileDir/<name>.cpu when it is stopped cleanly
	// (MESHD_CPUPROFILE); Node.Stop it before the test's end to get one.
	ProfileDir string
}

// Host is one namespace on the test network.
type Host struct {
	Net  *Net
	Name string // namespace name
	Link string // its veth end in the hub (or in its site's router, linkNS)
	IP   string // underlay address
	// linkNS is the namespace Link is in when it is not the hub: a site
	// host's router (natlab_test.go).
	linkNS string
}

var netSeq int

// NewNet creates the hub namespace and bridge; everything is removed when
// the test ends.
func NewNet(t testing.TB) *Net {
	t.Helper()
	n := &Net{t: t, subnet: 99}
	n.claimPrefix()
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.hub).Run() })
	n.in(n.hub, "ip", "link", "set", "lo", "up")
	n.in(n.hub, "ip", "link", "add", "br0", "type", "bridge")
	n.in(n.hub, "ip", "link", "set", "br0", "up")
	return n
}

// claimPrefix picks the net's name prefix and creates its hub namespace.
// `make e2e` runs the suite as several test processes at once (shards), so
// a prefix is claimed by creating the hub: "ip netns add" fails when the
// name is taken (another process whose pid%1000 and sequence spell the same
// prefix), and the next sequence number is tried. The host namespaces and
// the veth links (prefix + "v" + i, made in the root namespace) carry the
// claimed prefix, so they cannot collide either.
func (n *Net) claimPrefix() {
	n.t.Helper()
	for range 100 {
		netSeq++
		n.prefix = fmt.Sprintf("me%d%d", os.Getpid()%1000, netSeq)
		n.hub = n.prefix + "-hub"
		out, err := exec.Command("ip", "netns", "add", n.hub).CombinedOutput()
		if err == nil {
			return
		}
		if !strings.Contains(string(out), "File exists") {
			n.t.Fatalf("ip netns add %s: %v: %s", n.hub, err, out)
		}
	}
	n.t.Fatalf("ip netns add: no free namespace prefix after 100 tries (me%d*)", os.Getpid()%1000)
}

// NewNetIPv6 is NewNet with an IPv6-only underlay: every host's eth0
// carries fd99::<i>/64 (a unique local address) and no IPv4 address; the
// hosts' only IPv4 address is lo's 127.0.0.1.
func NewNetIPv6(t testing.TB) *Net {
	t.Helper()
	n := NewNet(t)
	n.ipv6 = true
	return n
}

// AddHost creates a namespace with address 10.99.0.<i> (fd99::<i> on an
// IPv6 net) on eth0.
func (n *Net) AddHost(name string) *Host {
	n.t.Helper()
	return n.AddHostWith(name, nil)
}

// AddHostWith is AddHost that runs prepare in the new namespace before
// eth0 is moved in (so that interfaces prepare adds come first, with lower
// indexes).
func (n *Net) AddHostWith(name string, prepare func(h *Host)) *Host {
	n.t.Helper()
	i := len(n.hosts) + 1
	h := &Host{Net: n, Name: fmt.Sprintf("%s-%s", n.prefix, name), Link: fmt.Sprintf("%sv%d", n.prefix, i),
		IP: fmt.Sprintf("10.%d.0.%d", n.subnet, i)}
	if n.ipv6 {
		h.IP = fmt.Sprintf("fd%d::%d", n.subnet, i)
	}
	run(n.t, "ip", "netns", "add", h.Name)
	n.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.Name).Run() })
	if prepare != nil {
		prepare(h)
	}
	run(n.t, "ip", "link", "add", h.Link, "type", "veth", "peer", "name", "eth0", "netns", h.Name)
	run(n.t, "ip", "link", "set", h.Link, "netns", n.hub)
	if n.delay == nil {
		n.in(n.hub, "ip", "link", "set", h.Link, "master", "br0")
	}
	n.in(n.hub, "ip", "link", "set", h.Link, "up")
	if n.delay != nil {
		if err := n.delay.addPort(h.Link); err != nil {
			n.t.Fatalf("delay bridge: %v", err)
		}
	}
	n.in(h.Name, "ip", "link", "set", "lo", "up")
	if n.ipv6 {
		// nodad: usable at once, not after duplicate address detection.
		n.in(h.Name, "ip", "-6", "addr", "add", h.IP+"/64", "dev", "eth0", "nodad")
	} else {
		n.in(h.Name, "ip", "addr", "add", h.IP+"/24", "dev", "eth0")
	}
	n.in(h.Name, "ip", "link", "set", "eth0", "up")
	n.hosts = append(n.hosts, h)
	return h
}

// Cut takes a host's link down (a network partition of that host).
func (h *Host) Cut() { h.Net.in(h.upstream(), "ip", "link", "set", h.Link, "down") }

// Heal brings it back.
func (h *Host) Heal() { h.Net.in(h.upstream(), "ip", "link", "set", h.Link, "up") }

// upstream is the namespace holding the host side's other end.
func (h *Host) upstream() string {
	if h.linkNS != "" {
		return h.linkNS
	}
	return h.Net.hub
}

// Delay adds d of one-way delay to every host-to-host path (a round trip
// of 2d), for hosts added before or after the call; calling it again
// changes d.
// The kernel here has no netem, so the first call takes the hosts' links
// out of br0 and forwards between them in userspace (see delayBridge).
func (n *Net) Delay(d time.Duration) {
	n.t.Helper()
	if n.delay != nil {
		n.delay.setDelay(d)
		return
	}
	links := make([]string, len(n.hosts))
	for i, h := range n.hosts {
		links[i] = h.Link
	}
	n.delay = startDelayBridge(n.t, n.hub, links, d)
}

// SiteDelay puts the hub ports of each group of hosts in a site of its
// own: frames between two hosts of one group go with no delay, between
// groups (or to a host in no group) with d one way. The NAT lab's sites are
// groups of hub hosts: a site's control nodes and its router (Site.Router),
// behind which the site's own hosts sit. Like Delay, the first call takes
// the links out of br0; calling Delay or SiteDelay again changes d, and
// SiteDelay again relabels the hosts it names.
func (n *Net) SiteDelay(d time.Duration, groups ...[]*Host) {
	n.t.Helper()
	n.Delay(d)
	links := make([][]string, len(groups))
	for i, g := range groups {
		for _, h := range g {
			if h.linkNS != "" {
				n.t.Fatalf("SiteDelay: %s is behind a site router, not on the hub; name its router", h.Name)
			}
			links[i] = append(links[i], h.Link)
		}
	}
	if err := n.delay.setSites(links); err != nil {
		n.t.Fatalf("SiteDelay: %v", err)
	}
}

// Exec runs a command inside the host's namespace.
func (h *Host) Exec(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// ListenTCP opens a TCP listener on h's underlay address and port, in h's
// namespace, from the test process; it is closed when the test ends.
func (h *Host) ListenTCP(t testing.TB, port string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := inNetns(h.Name, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(h.IP, port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// Ping sends one ICMP echo from h to ip and reports whether it came back.
func (h *Host) Ping(ctx context.Context, ip string) error {
	out, err := h.Exec(ctx, "ping", "-c", "1", "-W", "0.2", "-q", ip).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v: %s", ip, h.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

func (n *Net) in(ns string, args ...string) {
	n.t.Helper()
	run(n.t, append([]string{"ip", "netns", "exec", ns}, args...)...)
}

func run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// DropFrom drops every packet that reaches h from the underlay address ip
// (an nftables rule on the input hook in h's namespace): a one-way cut,
// which h's own packets to ip pass, and their answers do not. Undrop
// removes it.
func (h *Host) DropFrom(ip string) {
	h.Net.t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		h.Net.t.Fatalf("nft not found (%v); run scripts/install-deps.sh", err)
	}
	h.Net.in(h.Name, "nft", "add", "table", "inet", "cut")
	h.Net.in(h.Name, "nft", "add", "chain", "inet", "cut", "in", "{ type filter hook input priority 0; }")
	h.Net.in(h.Name, "nft", "add", "rule", "inet", "cut", "in", "ip", "saddr", ip, "drop")
}

// Undrop removes DropFrom's rule.
func (h *Host) Undrop() {
	h.Net.t.Helper()
	h.Net.in(h.Name, "nft", "delete", "table", "inet", "cut")
}
