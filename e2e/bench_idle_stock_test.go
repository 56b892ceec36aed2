//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/stocknebula"
)

// BenchmarkIdleAgainstStockNebula puts meshd's idle cost beside Nebula's
// own: an origin and two workers at `timers: lan` (meshd's default, log
// level info, raft at its default timing) and a stock nebula member (issue
// 35: the nebula binary of the version meshd embeds, configured from its
// bundle) on the same overlay, all idle with their tunnels up. Each round
// measures, over idleStockWindow, the CPU of the origin, a worker and the
// stock member in % of one core, and their context switches a second (every
// thread's, voluntary and not: each is a wakeup). The stock member is the
// floor an overlay of this Nebula costs at rest; what a worker costs above
// it is meshd's own (gossip riding the overlay, its loops, its runtime).
func BenchmarkIdleAgainstStockNebula(b *testing.B) {
	n := NewNet(b)
	n.Timers, n.DefaultRaft = "lan", true
	start := func(name string) *Node {
		nd := n.NewNode(name)
		setLogLevel(b, nd, "info")
		nd.Start(b)
		return nd
	}
	origin := start("origin")
	origin.MustCtl(b, "init", "--cluster", "e2e")
	nodes := []*Node{origin}
	for _, name := range []string{"w1", "w2"} {
		w := start(name)
		w.MustCtl(b, "join", origin.Admit(b, name))
		nodes = append(nodes, w)
	}
	allPairsPing(b, nodes, 20*time.Second)
	phone := newStockMember(b, n, origin, stocknebula.Version, "phone")
	ips := overlayIPs(b, origin)
	Eventually(b, 30*time.Second, "the stock member reaches every node", func() error {
		return reachBoth(b.Context(), phone, ips["phone"], "", nodes, ips, nil)
	})
	time.Sleep(idleStockSettle) // let the joins' and the first pings' work end: what follows is rest
	pids := []int{origin.cmd.Process.Pid, nodes[1].cmd.Process.Pid, phone.cmd.Process.Pid}
	names := []string{"origin", "worker", "stock-nebula"}
	cpu, sw := make([]float64, len(pids)), make([]float64, len(pids))
	over, under := make([]float64, len(pids)), make([]float64, len(pids))
	for i := range b.N {
		ticks, switches, pkts := cpuTicks(b, pids), wakeups(b, pids), netPackets(b, pids)
		began := time.Now()
		time.Sleep(idleStockWindow) // the window measured over, not a wait for an event
		window := time.Since(began).Seconds()
		ticks2, switches2, pkts2 := cpuTicks(b, pids), wakeups(b, pids), netPackets(b, pids)
		for j := range pids {
			cpu[j] = 100 * float64(ticks2[j]-ticks[j]) / clockTicks / window
			sw[j] = float64(switches2[j]-switches[j]) / window
			over[j] = float64(pkts2[j][0]-pkts[j][0]) / window
			under[j] = float64(pkts2[j][1]-pkts[j][1]) / window
		}
		b.Logf("round %d (timers: lan): origin CPU %.2f%% %.0f switches/s; worker %.2f%% %.0f/s; stock nebula %.2f%% %.0f/s; load %s",
			i+1, cpu[0], sw[0], cpu[1], sw[1], cpu[2], sw[2], loadAvg())
		b.Logf("round %d packets/s in+out, overlay device / underlay: origin %.1f / %.1f; worker %.1f / %.1f; stock nebula %.1f / %.1f",
			i+1, over[0], under[0], over[1], under[1], over[2], under[2])
	}
	for j, name := range names {
		b.ReportMetric(cpu[j], name+"-cpu%")
		Record(b, "idle-cpu-"+name, "%", cpu[j])
		Record(b, "idle-wakeups-"+name, "/s", sw[j])
		Record(b, "idle-overlay-packets-"+name, "/s", over[j])
		Record(b, "idle-underlay-packets-"+name, "/s", under[j])
	}
}

// Settle and window of BenchmarkIdleAgainstStockNebula.
const (
	idleStockSettle = 15 * time.Second
	idleStockWindow = 30 * time.Second
)

// wakeups is each process's context switches so far, summed over its
// threads (voluntary and involuntary).
func wakeups(tb testing.TB, pids []int) []int64 {
	tb.Helper()
	out := make([]int64, len(pids))
	for i, pid := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			tb.Fatal(err)
		}
		for _, task := range tasks {
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
			if err != nil {
				continue // a thread that ended meanwhile
			}
			for line := range strings.SplitSeq(string(raw), "\n") {
				k, v, ok := strings.Cut(line, ":")
				if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
					x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					out[i] += x
				}
			}
		}
	}
	return out
}

// netPackets is, for each process, the packets received and sent so far
// on the overlay device of its network namespace and on its underlay: the
// first is every interface but lo and eth*, the second eth* (each node
// and the stock member has its own namespace, with eth0 its underlay).
func netPackets(tb testing.TB, pids []int) [][2]int64 {
	tb.Helper()
	out := make([][2]int64, len(pids))
	for i, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", pid))
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n")[2:] {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			f := strings.Fields(rest)
			if !ok || len(f) < 10 || name == "lo" {
				continue
			}
			rx, _ := strconv.ParseInt(f[1], 10, 64)
			tx, _ := strconv.ParseInt(f[9], 10, 64)
			if strings.HasPrefix(name, "eth") {
				out[i][1] += rx + tx
			} else {
				out[i][0] += rx + tx
			}
		}
	}
	return out
}
