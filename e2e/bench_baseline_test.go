//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
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
)

// Overlay throughput against Nebula alone (issue 10). Two meshd workers,
// two nodes of the baseline program bench/nebulabaseline (the same Nebula
// v1.10.3, nothing around it, the settings meshd renders: MTU 1300, 1
// routine, 8 MiB socket buffers, AES-GCM, firewall any/any, fast timers),
// and the raw veth underlay between the two workers' namespaces, all on one
// bridge, measured in turn in every round: ping RTT, then one iperf3 TCP
// flow.

// iperfSeconds is the length of one iperf3 run (after a 1 s warm-up that
// is not counted).
const iperfSeconds = 5

// The baseline nodes' overlay network; each runs in its own namespace.
const baselineNet = "10.42.0"

// overlayPath is one way from a client namespace to a server address.
type overlayPath struct {
	name   string
	client *Host
	dst    string // address of the iperf3 server
	pids   []int  // the overlay processes on this path (sender, receiver), for CPU
}

// BenchmarkOverlayThroughput reports, per path, the median over b.N rounds
// of iperf3 TCP (Mbit/s) and ping RTT (ms), the ratios meshd/baseline, and
// the CPU (% of one core) the sending and receiving overlay process used
// during the iperf3 runs. MESHD_OVERLAY_PROFILE=DIR writes CPU and heap
// profiles of both meshd workers and CPU profiles of both baseline nodes
// there.
func BenchmarkOverlayThroughput(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Fatal("iperf3 not found: run scripts/install-deps.sh")
	}
	profDir := os.Getenv("MESHD_OVERLAY_PROFILE")
	n := NewNet(b)
	origin := n.NewNode("origin")
	origin.Start(b)
	origin.MustCtl(b, "init", "--cluster", "e2e")
	workers := []*Node{n.NewNode("w1"), n.NewNode("w2")}
	for _, w := range workers {
		if profDir != "" {
			w.Env = []string{"MESHD_CPUPROFILE=" + filepath.Join(profDir, "meshd-"+w.NodeName+".cpu"),
				"MESHD_HEAPPROFILE=" + filepath.Join(profDir, "meshd-"+w.NodeName+".heap")}
		}
		w.Start(b)
		w.MustCtl(b, "join", origin.Admit(b, w.NodeName))
	}
	w1, w2 := workers[0], workers[1]
	ips := overlayIPs(b, origin)
	bl := startBaseline(b, n, profDir)
	allPairsPing(b, []*Node{origin, w1, w2}, 10*time.Second)
	Eventually(b, 10*time.Second, "baseline a pings baseline b", func() error {
		return bl[1].host.Ping(b.Context(), baselineNet+".3")
	})

	startIperfServer(b, w2.Host)
	startIperfServer(b, bl[2].host)
	paths := []overlayPath{
		{"meshd", w1.Host, ips["w2"], []int{w1.cmd.Process.Pid, w2.cmd.Process.Pid}},
		{"baseline", bl[1].host, baselineNet + ".3", []int{bl[1].cmd.Process.Pid, bl[2].cmd.Process.Pid}},
		{"raw", w1.Host, w2.IP, nil},
	}
	idle := ""
	for _, p := range paths[:2] { // idle, tunnels up
		rss, anon := statusMB(b, p.pids[0], "VmRSS:"), statusMB(b, p.pids[0], "RssAnon:")
		b.ReportMetric(rss, p.name+"-idle-rss-MB")
		idle += fmt.Sprintf("%s RSS %.1f MB (anon %.1f); ", p.name, rss, anon)
	}
	b.Logf("idle: %sload %s", idle, loadAvg())
	mbps := map[string][]float64{}
	rtt := map[string][]float64{}
	cpu := map[string][]float64{}
	b.ResetTimer()
	for i := range b.N {
		line := fmt.Sprintf("round %d:", i+1)
		for _, p := range paths {
			r := measureRTT(b, p.client, p.dst)
			before := cpuTicks(b, p.pids)
			start := time.Now()
			m := iperfTCP(b, p.client, p.dst)
			used := cpuTicks(b, p.pids)
			window := time.Since(start).Seconds()
			var pct []string
			for j := range used {
				c := 100 * float64(used[j]-before[j]) / clockTicks / window
				cpu[p.name+strconv.Itoa(j)] = append(cpu[p.name+strconv.Itoa(j)], c)
				pct = append(pct, fmt.Sprintf("%.0f%%", c))
			}
			mbps[p.name] = append(mbps[p.name], m)
			rtt[p.name] = append(rtt[p.name], r)
			line += fmt.Sprintf(" %s %.0f Mbit/s %.3f ms cpu %v;", p.name, m, r, pct)
		}
		b.Logf("%s load %s", line, loadAvg())
	}
	b.StopTimer()
	for _, p := range paths {
		b.ReportMetric(medianOf(mbps[p.name]), p.name+"-Mbps")
		b.ReportMetric(medianOf(rtt[p.name]), p.name+"-rtt-ms")
		if len(p.pids) == 2 {
			b.ReportMetric(medianOf(cpu[p.name+"0"]), p.name+"-sender-cpu%")
			b.ReportMetric(medianOf(cpu[p.name+"1"]), p.name+"-receiver-cpu%")
		}
	}
	tput := medianOf(mbps["meshd"]) / medianOf(mbps["baseline"])
	lat := medianOf(rtt["meshd"]) / medianOf(rtt["baseline"])
	b.ReportMetric(tput, "tcp-ratio")
	b.ReportMetric(lat, "rtt-ratio")
	b.Logf("meshd/baseline: TCP %.2fx (target >= 1.0x), RTT %.2fx (target <= 1.1x); load after: %s", tput, lat, loadAvg())
	if profDir != "" { // clean exits write the profiles
		for _, w := range workers {
			w.Stop(b)
		}
		for _, x := range bl {
			x.stop(b)
		}
		b.Logf("profiles in %s", profDir)
	}
}

// baselineNode is one nebulabaseline process in its own namespace.
type baselineNode struct {
	host *Host
	cmd  *exec.Cmd
	done chan struct{}
}

func (x *baselineNode) stop(t testing.TB) {
	if x.cmd == nil {
		return
	}
	_ = x.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-x.done:
	case <-time.After(10 * time.Second):
		t.Errorf("nebulabaseline in %s ignored SIGTERM for 10 s", x.host.Name)
		_ = x.cmd.Process.Kill()
		<-x.done
	}
	x.cmd = nil
}

var buildBaselineOnce = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "nebulabaseline")
	cmd := exec.Command("go", "build", "-o", bin, "../bench/nebulabaseline")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nebulabaseline: %v\n%s", err, out)
	}
	return bin, nil
})

// startBaseline starts a lighthouse and two nodes of the baseline program
// on n, with meshd's data-path settings, and returns them lighthouse first.
func startBaseline(t testing.TB, n *Net, profDir string) []*baselineNode {
	t.Helper()
	bin, err := buildBaselineOnce()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	names := []string{"bl-lh", "bl-a", "bl-b"}
	var specs []string
	for i, name := range names {
		specs = append(specs, fmt.Sprintf("%s=%s.%d/16", name, baselineNet, i+1))
	}
	run(t, bin, "-gencerts", dir, "-nodes", strings.Join(specs, ","))
	var out []*baselineNode
	var lh string
	for i, name := range names {
		h := n.AddHost(name)
		args := []string{"netns", "exec", h.Name, bin, "-certs", dir, "-name", name,
			"-listen", "0.0.0.0:4242", "-dev", "nebula1", "-fast"}
		if i == 0 {
			lh = fmt.Sprintf("%s.1=%s:4242", baselineNet, h.IP)
			args = append(args, "-am-lighthouse")
		}
		args = append(args, "-lighthouses", lh)
		if profDir != "" && i > 0 {
			args = append(args, "-cpuprofile", filepath.Join(profDir, "baseline-"+name+".cpu"))
		}
		logPath := filepath.Join(dir, name+".log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_ = logf.Close()
		x := &baselineNode{host: h, cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(x.done) }()
		t.Cleanup(func() {
			x.stop(t)
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("log of %s:\n%s", name, b)
			}
		})
		out = append(out, x)
	}
	return out
}

// startIperfServer runs `iperf3 -s` in h until the test ends.
func startIperfServer(t testing.TB, h *Host) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", h.Name, "iperf3", "-s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	Eventually(t, 5*time.Second, "iperf3 listening in "+h.Name, func() error {
		out, err := h.Exec(t.Context(), "ss", "-Hltn", "sport = :5201").Output()
		if err != nil || len(strings.TrimSpace(string(out))) == 0 {
			return fmt.Errorf("not listening (%v)", err)
		}
		return nil
	})
}

// iperfTCP runs one iperf3 TCP flow from h to dst and returns what the
// receiver counted, in Mbit/s.
func iperfTCP(t testing.TB, h *Host, dst string) float64 {
	t.Helper()
	out, err := h.Exec(t.Context(), "iperf3", "-c", dst, "-t", strconv.Itoa(iperfSeconds), "-O", "1", "-J").Output()
	if err != nil {
		t.Fatalf("iperf3 from %s to %s: %v\n%s", h.Name, dst, err, out)
	}
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("iperf3 output: %v\n%s", err, out)
	}
	if r.End.SumReceived.BitsPerSecond <= 0 {
		t.Fatalf("iperf3 from %s to %s received nothing:\n%s", h.Name, dst, out)
	}
	return r.End.SumReceived.BitsPerSecond / 1e6
}

// measureRTT is the mean RTT in ms of 50 pings from h to dst, 20 ms apart;
// any loss fails the test.
func measureRTT(t testing.TB, h *Host, dst string) float64 {
	t.Helper()
	out, err := h.Exec(t.Context(), "ping", "-c", "50", "-i", "0.02", "-q", dst).CombinedOutput()
	if err != nil {
		t.Fatalf("ping from %s to %s: %v\n%s", h.Name, dst, err, out)
	}
	// rtt min/avg/max/mdev = 0.041/0.060/0.120/0.015 ms
	for _, line := range strings.Split(string(out), "\n") {
		if _, stats, ok := strings.Cut(line, " = "); ok && strings.HasPrefix(line, "rtt") {
			f := strings.Split(stats, "/")
			if len(f) >= 2 {
				if v, err := strconv.ParseFloat(f[1], 64); err == nil {
					return v
				}
			}
		}
	}
	t.Fatalf("ping from %s to %s: no rtt line:\n%s", h.Name, dst, out)
	return 0
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's utime and stime
// (100 on every Linux this runs on).
const clockTicks = 100

// cpuTicks is utime+stime of each process, in clock ticks.
func cpuTicks(t testing.TB, pids []int) []int64 {
	t.Helper()
	out := make([]int64, len(pids))
	for i, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The command name may hold spaces; the fields after it do not.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[i] = utime + stime
	}
	return out
}

// loadAvg is the machine's 1-minute load average, for the log.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(raw))[0]
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
