//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// Overlay throughput against Nebula alone (issue 10; issue 25 item 4) and
// wireguard-go (issue 53 item 5). On one bridge: a meshd cluster as
// installed (the packaged meshd.yaml,
// nothing added but its paths: bind_addr 0.0.0.0, timers lan, log_level
// info), a meshd cluster with the e2e harness's settings (bound to the
// node's address, fast timers, debug logs, short raft timers), three nodes
// of the baseline program bench/nebulabaseline (the same Nebula v1.11.0,
// nothing around it, the Nebula config meshd renders by default: the
// data-path settings and Nebula's own timers), wireguard-go over TUN
// between the harness's two workers' namespaces (bench_wireguard_test.go),
// and the raw veth underlay between those same two namespaces. Each round
// measures every path in turn, ping RTT, one iperf3 TCP flow, then four
// in parallel, starting from a different path each round so that a change
// of the machine's load falls on all of them alike; each ratio is taken
// within its round (bench/report pairs the paths' samples by index: they
// are in round order).

// minOverlayRounds is the fewest rounds BenchmarkOverlayThroughput
// measures, whatever -benchtime says: one round on this shared 2-core
// machine swings by ±10% either way.
const minOverlayRounds = 5

// overlayPath is one way from a client namespace to a server address.
type overlayPath struct {
	name   string
	client *Host
	dst    string // address of the iperf3 server
	pids   []int  // the overlay processes on this path (sender, receiver), for CPU
}

// pathRounds is what one path measured, one entry per round.
type pathRounds struct {
	mbps, mbps4, rtt []float64 // TCP with 1 and 4 streams, Mbit/s; RTT, ms
	sender, receiver []float64 // CPU during the single flow, % of one core
	cpuGB, cpuGB4    []float64 // CPU-seconds of both ends per GB sent, 1 and 4 streams
}

// BenchmarkOverlayThroughput reports, per path, the median over the rounds
// (at least minOverlayRounds; more with -benchtime Nx, N > 5) of iperf3 TCP
// in Mbit/s with one stream and with four (-P 4), ping RTT in ms, the CPU
// (% of one core) the sending and receiving overlay process used during
// the single flow, and the CPU-seconds both used per GB (1e9 bytes) the
// sender wrote, for either flow (not for raw veth: no overlay process);
// and, for meshd as installed and meshd in the harness, the ratio to
// Nebula alone of each round with its median and spread. It records them
// for bench/report, which also compares every path with wireguard-go. The
// targets (issue 25: TCP >= 1.0x Nebula alone, RTT <= 1.1x; issue 53's
// against wireguard-go) are reported, not asserted: see
// docs/performance.md for how noisy one run is.
//
// MESHD_OVERLAY_PROFILE=DIR writes CPU and heap profiles of the sending
// and receiving meshd of both clusters and CPU profiles of both baseline
// nodes there. MESHD_OVERLAY_INSTALLED_EXTRA="KEY: VALUE\n..." is appended
// to the installed nodes' meshd.yaml, "{ip}" replaced by each node's
// underlay address: one setting at a time, to see what it costs (for
// example 'bind_addr: "{ip}"', 'timers: fast' or 'log_level: debug').
// MESHD_OVERLAY_INSTALLED_ENV="K=V ..." adds to their environment (for
// example GOGC=100). MESHD_OVERLAY_BASELINE_ARGS="-fast ..." adds flags
// to the baseline nodes' (see bench/nebulabaseline).
func BenchmarkOverlayThroughput(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Fatal("iperf3 not found: run scripts/install-deps.sh")
	}
	profDir := os.Getenv("MESHD_OVERLAY_PROFILE")
	extra := os.Getenv("MESHD_OVERLAY_INSTALLED_EXTRA")
	if extra != "" && !strings.HasSuffix(extra, "\n") {
		extra += "\n"
	}
	n := NewNet(b)
	env := strings.Fields(os.Getenv("MESHD_OVERLAY_INSTALLED_ENV"))
	installed := overlayCluster(b, "installed", profDir, env,
		n.NewInstalledNode("io", extra), n.NewInstalledNode("i1", extra), n.NewInstalledNode("i2", extra))
	harness := overlayCluster(b, "harness", profDir, nil, n.NewNode("origin"), n.NewNode("w1"), n.NewNode("w2"))
	bl := startBaseline(b, n, profDir, strings.Fields(os.Getenv("MESHD_OVERLAY_BASELINE_ARGS")))
	Eventually(b, 10*time.Second, "baseline a pings baseline b", func() error {
		return bl[1].host.Ping(b.Context(), baselineNet+".3")
	})
	startIperfServer(b, bl[2].host)
	baseline := overlayPath{"baseline", bl[1].host, baselineNet + ".3", []int{bl[1].cmd.Process.Pid, bl[2].cmd.Process.Pid}}
	wg := startWireguardGo(b, harness.client, harness.nodes[2].Host)    // w1 to w2, whose iperf3 serves on every address
	raw := overlayPath{"raw", harness.client, harness.nodes[2].IP, nil} // w1 to w2 on the underlay
	paths := []overlayPath{installed.overlayPath, harness.overlayPath, baseline, wg, raw}
	idle := ""
	for _, p := range paths[:4] { // idle, tunnels up
		rss, anon := statusMB(b, p.pids[0], "VmRSS:"), statusMB(b, p.pids[0], "RssAnon:")
		RecordWith(b, overlayTimers(p.name), p.name+"-idle-rss", "MB", rss)
		idle += fmt.Sprintf("%s RSS %.1f MB (anon %.1f); ", p.name, rss, anon)
	}
	b.Logf("idle: %sload %s", idle, loadAvg())
	got := map[string]*pathRounds{}
	for _, p := range paths {
		got[p.name] = &pathRounds{}
	}
	round := 0
	measure := func() {
		line := fmt.Sprintf("round %d (load %s):", round+1, loadAvg())
		for k := range paths {
			p := paths[(round+k)%len(paths)]
			line += measurePath(b, p, got[p.name])
		}
		i := len(got["baseline"].mbps) - 1
		base, wgo := got["baseline"].mbps[i], got["wireguard-go"].mbps[i]
		b.Logf("%s installed/baseline %.2fx, harness/baseline %.2fx, installed/wireguard-go %.2fx; load %s", line,
			got["installed"].mbps[i]/base, got["harness"].mbps[i]/base, got["installed"].mbps[i]/wgo, loadAvg())
		round++
	}
	for b.Loop() {
		measure()
	}
	for round < minOverlayRounds {
		measure()
	}
	reportOverlay(b, paths, got)
	if profDir != "" { // clean exits write the profiles
		for _, nd := range append(installed.nodes, harness.nodes...) {
			nd.Stop(b)
		}
		for _, x := range bl {
			x.stop(b)
		}
		b.Logf("profiles in %s", profDir)
	}
}

// clusterPath is an overlayPath between the two workers of a meshd
// cluster, with its nodes (origin first).
type clusterPath struct {
	overlayPath
	nodes []*Node
}

// overlayCluster starts origin, runs `meshctl init` on it and joins the two
// workers, waits until all three ping each other over the overlay, starts
// an iperf3 server on the second worker and returns the path from the
// first worker to it. Every node gets env added to its environment. With
// profDir set the workers write CPU and heap profiles there
// (meshd-NAME.cpu, .heap) when they stop.
func overlayCluster(b *testing.B, name, profDir string, env []string, origin, w1, w2 *Node) clusterPath {
	b.Helper()
	origin.Env = env
	origin.Start(b)
	origin.MustCtl(b, "init", "--cluster", "e2e", "--name", origin.NodeName)
	for _, w := range []*Node{w1, w2} {
		w.Env = env
		if profDir != "" {
			w.Env = append(slices.Clip(env), "MESHD_CPUPROFILE="+filepath.Join(profDir, "meshd-"+w.NodeName+".cpu"),
				"MESHD_HEAPPROFILE="+filepath.Join(profDir, "meshd-"+w.NodeName+".heap"))
		}
		w.Start(b)
		w.MustCtl(b, "join", origin.Admit(b, w.NodeName))
	}
	nodes := []*Node{origin, w1, w2}
	allPairsPing(b, nodes, 10*time.Second)
	startIperfServer(b, w2.Host)
	ips := overlayIPs(b, origin)
	directTunnel(b, w1, ips[w2.NodeName], w2.IP)
	return clusterPath{overlayPath{name, w1.Host, ips[w2.NodeName], []int{w1.cmd.Process.Pid, w2.cmd.Process.Pid}}, nodes}
}

// directTunnel fails the benchmark unless from's tunnel to overlayIP is
// direct, to underlay (what the path is meant to measure), not relayed.
// It waits up to 10 s for the tunnel to be listed: a node lists the
// tunnels to the peers its overlay config names, and a ping may cross a
// tunnel built through the lighthouse before the peer's record has
// reached this node (seen with Nebula v1.11.0 and the packaged config).
func directTunnel(b *testing.B, from *Node, overlayIP, underlay string) {
	b.Helper()
	Eventually(b, 10*time.Second, from.NodeName+" lists its tunnel to "+overlayIP, func() error {
		var st apitype.Status
		if err := from.CtlJSON(b.Context(), &st, "status"); err != nil {
			return err
		}
		if st.Overlay == nil {
			return fmt.Errorf("%s: no overlay in its status", from.NodeName)
		}
		for _, tu := range st.Overlay.Tunnels {
			if tu.OverlayIP != overlayIP {
				continue
			}
			if host, _, err := net.SplitHostPort(tu.Remote); tu.Relayed || err != nil || host != underlay {
				b.Fatalf("%s: tunnel to %s goes to %q (relayed %v), not straight to %s", from.NodeName, overlayIP, tu.Remote, tu.Relayed, underlay)
			}
			return nil
		}
		return fmt.Errorf("%s: no tunnel to %s in %+v", from.NodeName, overlayIP, st.Overlay.Tunnels)
	})
}

// measurePath measures one round of p into r: the mean RTT of 50 pings,
// then one iperf3 flow and four in parallel with the CPU the overlay
// processes used during each. It returns the round's figures for the log.
func measurePath(b *testing.B, p overlayPath, r *pathRounds) string {
	b.Helper()
	rtt := measureRTT(b, p.client, p.dst)
	m, cpu, perGB := measureFlows(b, p, 1)
	m4, _, perGB4 := measureFlows(b, p, 4)
	r.mbps, r.mbps4, r.rtt = append(r.mbps, m), append(r.mbps4, m4), append(r.rtt, rtt)
	out := fmt.Sprintf(" %s %.0f/%.0f Mbit/s %.3f ms", p.name, m, m4, rtt)
	if len(p.pids) == 2 {
		r.sender, r.receiver = append(r.sender, cpu[0]), append(r.receiver, cpu[1])
		r.cpuGB, r.cpuGB4 = append(r.cpuGB, perGB), append(r.cpuGB4, perGB4)
		out += fmt.Sprintf(" cpu %.0f%%/%.0f%% %.1f/%.1f s/GB", cpu[0], cpu[1], perGB, perGB4)
	}
	return out + ";"
}

// measureFlows runs iperf3 over p with streams TCP flows and returns what
// the receiver counted (Mbit/s), the CPU each of p's overlay processes
// used over the run (% of one core) and their CPU-seconds together per GB
// the sender wrote (nil and 0 for a path without overlay processes).
func measureFlows(b *testing.B, p overlayPath, streams int) (mbps float64, cpu []float64, perGB float64) {
	b.Helper()
	before := cpuTicks(b, p.pids)
	start := time.Now()
	mbps, sent := iperfFlows(b, p.client, p.dst, streams)
	used := cpuTicks(b, p.pids)
	window := time.Since(start).Seconds()
	var secs float64
	for i := range p.pids {
		s := float64(used[i]-before[i]) / clockTicks
		cpu = append(cpu, 100*s/window)
		secs += s
	}
	if len(p.pids) > 0 {
		perGB = secs / (sent / 1e9)
	}
	return mbps, cpu, perGB
}

// reportOverlay reports and records the medians of every path and the
// per-round ratios of both meshd paths to Nebula alone.
func reportOverlay(b *testing.B, paths []overlayPath, got map[string]*pathRounds) {
	b.Helper()
	for _, p := range paths {
		r := got[p.name]
		b.ReportMetric(medianOf(r.mbps), p.name+"-Mbps")
		b.ReportMetric(medianOf(r.mbps4), p.name+"-p4-Mbps")
		b.ReportMetric(medianOf(r.rtt), p.name+"-rtt-ms")
		RecordWith(b, overlayTimers(p.name), p.name, "Mbit/s", medianOf(r.mbps), r.mbps...)
		RecordWith(b, overlayTimers(p.name), p.name+"-p4", "Mbit/s", medianOf(r.mbps4), r.mbps4...)
		RecordWith(b, overlayTimers(p.name), p.name+"-rtt", "ms", medianOf(r.rtt), r.rtt...)
		if len(r.sender) > 0 {
			b.ReportMetric(medianOf(r.sender), p.name+"-sender-cpu%")
			b.ReportMetric(medianOf(r.receiver), p.name+"-receiver-cpu%")
			b.ReportMetric(medianOf(r.cpuGB), p.name+"-cpu-per-gb-s/GB")
			b.ReportMetric(medianOf(r.cpuGB4), p.name+"-p4-cpu-per-gb-s/GB")
			RecordWith(b, overlayTimers(p.name), p.name+"-sender-cpu", "%", medianOf(r.sender), r.sender...)
			RecordWith(b, overlayTimers(p.name), p.name+"-receiver-cpu", "%", medianOf(r.receiver), r.receiver...)
			RecordWith(b, overlayTimers(p.name), p.name+"-cpu-per-gb", "s/GB", medianOf(r.cpuGB), r.cpuGB...)
			RecordWith(b, overlayTimers(p.name), p.name+"-p4-cpu-per-gb", "s/GB", medianOf(r.cpuGB4), r.cpuGB4...)
		}
	}
	base := got["baseline"]
	for _, name := range []string{"installed", "harness"} {
		tcp, rtt := ratios(got[name].mbps, base.mbps), ratios(got[name].rtt, base.rtt)
		b.ReportMetric(medianOf(tcp), name+"-tcp-ratio")
		b.ReportMetric(medianOf(rtt), name+"-rtt-ratio")
		RecordWith(b, overlayTimers(name), name+"-tcp-ratio", "x", medianOf(tcp), tcp...)
		RecordWith(b, overlayTimers(name), name+"-rtt-ratio", "x", medianOf(rtt), rtt...)
		b.Logf("%s/baseline: TCP per round %s, median %.2fx (%.2f–%.2f; target >= 1.0x); RTT median %.2fx (%.2f–%.2f; target <= 1.1x); load %s",
			name, fmtRatios(tcp), medianOf(tcp), slices.Min(tcp), slices.Max(tcp), medianOf(rtt), slices.Min(rtt), slices.Max(rtt), loadAvg())
	}
	wg := got["wireguard-go"]
	for _, name := range []string{"installed", "harness", "baseline"} { // issue 53's targets, for the log
		r := got[name]
		b.Logf("%s/wireguard-go, medians of the rounds' ratios: TCP %.2fx (target >= 1.0x), 4 streams %.2fx (>= 1.0x), CPU per GB %.2fx (<= 1.2x), RTT %.2fx",
			name, medianOf(ratios(r.mbps, wg.mbps)), medianOf(ratios(r.mbps4, wg.mbps4)), medianOf(ratios(r.cpuGB, wg.cpuGB)), medianOf(ratios(r.rtt, wg.rtt)))
	}
}

// overlayTimers is what each path's records say about timers: the
// installed cluster runs meshd's defaults (lan), the harness the suite's
// fast timers, Nebula alone and wireguard-go their own, and the raw veth
// none. (The data path
// does not use gossip's timers; the label says what ran.)
func overlayTimers(path string) map[string]string {
	t := map[string]string{"installed": "lan", "harness": "fast", "baseline": "nebula", "wireguard-go": "wireguard-go", "raw": "none"}[path]
	return map[string]string{"timers": t}
}

// ratios is a[i]/b[i] for each round i.
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

func fmtRatios(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}
