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

// The yardstick of BenchmarkOverlayThroughput: three nodes of the
// baseline program bench/nebulabaseline (Nebula v1.11.0 and nothing around
// it) in namespaces of their own, and the iperf3, ping and /proc helpers
// every path is measured with.

// The baseline nodes' overlay network; each runs in its own namespace.
const baselineNet = "10.42.0"

// iperfSeconds is the length of one iperf3 run (after a 1 s warm-up that
// is not counted).
const iperfSeconds = 5

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
// on n, with meshd's data-path settings and Nebula's own timers (what
// meshd renders for `timers: lan`, its default), and returns them
// lighthouse first. extra is added to every node's flags (-fast: the
// timers meshd renders for `timers: fast`).
func startBaseline(t testing.TB, n *Net, profDir string, extra []string) []*baselineNode {
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
			"-listen", "0.0.0.0:4242", "-dev", "nebula1"}
		args = append(args, extra...)
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
	mbps, _ := iperfFlows(t, h, dst, 1)
	return mbps
}

// iperfFlows runs iperf3 from h to dst with streams parallel TCP flows
// (-P) and returns what the receiver counted, in Mbit/s, and the bytes
// the sender wrote over the whole run, the warm-up second included (what
// crossed the overlay while its processes' CPU was being counted).
func iperfFlows(t testing.TB, h *Host, dst string, streams int) (mbps, sent float64) {
	t.Helper()
	out, err := h.Exec(t.Context(), "iperf3", "-c", dst, "-t", strconv.Itoa(iperfSeconds), "-O", "1",
		"-P", strconv.Itoa(streams), "-J").Output()
	if err != nil {
		t.Fatalf("iperf3 from %s to %s: %v\n%s", h.Name, dst, err, out)
	}
	var r struct {
		Intervals []struct {
			Sum struct {
				Bytes float64 `json:"bytes"`
			} `json:"sum"`
		} `json:"intervals"`
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
	for _, iv := range r.Intervals { // the omitted warm-up's intervals are listed too
		sent += iv.Sum.Bytes
	}
	return r.End.SumReceived.BitsPerSecond / 1e6, sent
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
