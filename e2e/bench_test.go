//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The numbers issue 3 asks for, measured on the namespace harness with
// `make bench`. Each benchmark builds its cluster outside the timer and
// reports its figures with b.ReportMetric; ns/op is not the figure to read.

// BenchmarkJoin: a worker's `meshctl join` from start to exit 0
// (join-ms), and from join returning until every existing node can ping the
// new node's overlay IP (reach-ms).
func BenchmarkJoin(b *testing.B) {
	n := NewNet(b)
	nodes := cluster(b, n, "w1", "w2")
	allPairsPing(b, nodes, 10*time.Second)
	var joinTotal, reachTotal time.Duration
	var joins, reaches []time.Duration
	b.ResetTimer()
	for i := range b.N {
		w, joined, reached := joinOnce(b, n, nodes[0], nodes, fmt.Sprintf("j%d", i))
		joinTotal += joined
		reachTotal += reached
		joins, reaches = append(joins, joined), append(reaches, reached)
		nodes = append(nodes, w)
		b.Logf("join %d: join %s, reached by all %d nodes in %s", i, joined.Round(time.Millisecond), len(nodes)-1, reached.Round(time.Millisecond))
	}
	b.ReportMetric(float64(joinTotal.Milliseconds())/float64(b.N), "join-ms")
	b.ReportMetric(float64(reachTotal.Milliseconds())/float64(b.N), "reach-ms")
	Record(b, "join", "ms", ms(joinTotal/time.Duration(b.N)), msOf(joins)...)
	Record(b, "reach", "ms", ms(reachTotal/time.Duration(b.N)), msOf(reaches)...)
}

// BenchmarkFailureDetection: a killed worker seen as failed by every other
// node (detect-ms), on a plain link and with 25, 50 and 100 ms of one-way
// delay between every two hosts (Net.Delay: this kernel has no netem, so a userspace
// forwarder in the hub delays every frame); before each kill the cluster is
// watched for 3 s and any node seen as anything but alive counts as a false
// positive.
func BenchmarkFailureDetection(b *testing.B) {
	for _, tc := range []struct {
		timers string
		delay  time.Duration
	}{{"fast", 0}, {"fast", 25 * time.Millisecond}, {"fast", 50 * time.Millisecond}, {"fast", 100 * time.Millisecond}, {"lan", 0}} {
		delay := tc.delay
		b.Run(fmt.Sprintf("timers=%s/delay=%s", tc.timers, delay), func(b *testing.B) {
			n := NewNet(b)
			n.Timers = tc.timers
			nodes := cluster(b, n, "w1", "w2", "w3")
			if delay > 0 {
				n.Delay(delay)
			}
			victim := nodes[len(nodes)-1]
			others := nodes[:len(nodes)-1]
			var detectTotal time.Duration
			var detects []time.Duration
			falsePositives := 0
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				falsePositives += watchAllAlive(b, nodes, 3*time.Second)
				b.StartTimer()
				victim.Kill()
				start := time.Now()
				var wg sync.WaitGroup
				for _, o := range others {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, err := waitFor(b.Context(), 15*time.Second, func() error {
							if s := gossipStateOf(b, o, victim.NodeName); s != "failed" {
								return fmt.Errorf("state %q", s)
							}
							return nil
						})
						if err != nil {
							b.Errorf("%s never saw the victim failed: %v", o.NodeName, err)
						}
					}()
				}
				wg.Wait()
				detectTotal += time.Since(start)
				detects = append(detects, time.Since(start))
				if b.Failed() {
					b.FailNow()
				}
				b.StopTimer()
				victim.Start(b)
				for _, o := range others {
					Eventually(b, 15*time.Second, o.NodeName+" sees the victim back", func() error {
						if s := gossipState(b, o, victim.NodeName); s != "alive" {
							return fmt.Errorf("state %q", s)
						}
						return nil
					})
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(detectTotal.Milliseconds())/float64(b.N), "detect-ms")
			b.ReportMetric(float64(falsePositives), "false-positives")
			Record(b, "detect", "ms", ms(detectTotal/time.Duration(b.N)), msOf(detects)...)
			Record(b, "false-positives", "count", float64(falsePositives))
		})
	}
}

// BenchmarkRemovalGossip: a worker removed while it keeps running, from
// `meshctl remove` returning until no other member counts it as a live
// gossip member (gone-ms: goneFromViews on every member, status and
// nodes), with the suite's fast timers and with meshd's defaults
// (`timers: lan`); target 2 s each (issue 25 item 3). remove-ms is the
// removal itself (raft, the key rotation, the members' acknowledgements).
// Each iteration joins a fresh worker outside the timer and removes it;
// the removed ones keep running.
func BenchmarkRemovalGossip(b *testing.B) {
	for _, timers := range []string{"fast", "lan"} {
		b.Run("timers="+timers, func(b *testing.B) {
			n := NewNet(b)
			n.Timers = timers
			n.ExtraConfig = "gossip_pool: true\n" // the workers in the gossip pool it measures (out of it by default)
			nodes := cluster(b, n, "w1", "w2")
			var removes, gones []time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				name := fmt.Sprintf("r%d", i)
				w := n.NewNode(name)
				w.Start(b)
				w.MustCtl(b, "join", nodes[0].Admit(b, name))
				Eventually(b, 20*time.Second, "every member sees "+name+" alive", func() error {
					return everyoneSeesAlive(b.Context(), append(nodes, w))
				})
				b.StartTimer()
				returned, gone, err := removeTimed(b, nodes[0], nodes, name, 30*time.Second)
				if err != nil {
					b.Fatalf("%s not out of every member's gossip view: %v", name, err)
				}
				removes, gones = append(removes, returned), append(gones, gone)
				b.Logf("remove %s returned after %s; out of every member's gossip view %s after that",
					name, returned.Round(time.Millisecond), gone.Round(time.Millisecond))
			}
			b.StopTimer()
			slices.Sort(gones)
			b.ReportMetric(float64(gones[len(gones)-1].Milliseconds()), "gone-max-ms")
			Record(b, "gone", "ms", ms(gones[len(gones)-1]), msOf(gones)...)
			sortedRemoves := slices.Sorted(slices.Values(removes))
			Record(b, "remove", "ms", ms(rank(sortedRemoves, 50)), msOf(removes)...)
			if g := gones[len(gones)-1]; g > removalWithin {
				b.Errorf("a removed node stayed in a member's gossip view %s after remove returned, over %s", g, removalWithin)
			}
		})
	}
}

// everyoneSeesAlive is nil once every node's status counts all of nodes
// alive.
func everyoneSeesAlive(ctx context.Context, nodes []*Node) error {
	for _, nd := range nodes {
		st, err := status(ctx, nd)
		if err != nil {
			return err
		}
		if st.Gossip.Alive != len(nodes) {
			return fmt.Errorf("%s counts %d alive, want %d", nd.NodeName, st.Gossip.Alive, len(nodes))
		}
	}
	return nil
}

// watchAllAlive polls every node's view for d and counts observations of a
// member that is not alive.
func watchAllAlive(b *testing.B, nodes []*Node, d time.Duration) int {
	bad := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, nd := range nodes {
			for _, x := range nd.Nodes(b) {
				if x.Gossip != "alive" {
					bad++
					b.Logf("false positive: %s sees %s %s", nd.NodeName, x.Name, x.Gossip)
				}
			}
		}
	}
	return bad
}

// BenchmarkIdleRSS: resident memory and CPU of an idle meshd (origin and
// worker) in a formed three-node cluster with its overlay up: RSS, its
// anonymous part (heap, stacks, written globals; the rest is the binary's
// pages), and the CPU each used over the same idleWindow, in % of one
// core. Twice: with the e2e settings (timers fast, log_level debug) and
// with the production defaults (timers lan, log_level info). The issue's
// bounds for a worker are asserted with the production defaults: RSS <=
// 30 MB, CPU < 0.5% (fast gossip timers alone cost more than that).
// MESHD_IDLE_ENV="K=V ..." adds to every meshd's environment (for example
// GODEBUG=gctrace=1, whose lines land in the node's log);
// MESHD_IDLE_PROFILE=DIR writes each node's CPU and heap profile there
// (they stop cleanly at the end); MESHD_IDLE_SMAPS=DIR writes the origin's
// and the worker's /proc/PID/smaps there, to see which mappings hold the
// resident pages.
func BenchmarkIdleRSS(b *testing.B) {
	for _, tc := range []struct {
		timers, logLevel string
		bounds           bool
	}{{"fast", "debug", false}, {"lan", "info", true}} {
		b.Run("timers="+tc.timers, func(b *testing.B) {
			n := NewNet(b)
			n.Timers = tc.timers
			profDir := os.Getenv("MESHD_IDLE_PROFILE")
			start := func(name string) *Node {
				nd := n.NewNode(name)
				setLogLevel(b, nd, tc.logLevel)
				nd.Env = strings.Fields(os.Getenv("MESHD_IDLE_ENV"))
				if profDir != "" {
					p := filepath.Join(profDir, tc.timers+"-"+name)
					nd.Env = append(nd.Env, "MESHD_CPUPROFILE="+p+".cpu", "MESHD_HEAPPROFILE="+p+".heap")
				}
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
			allPairsPing(b, nodes, 10*time.Second)
			pids := []int{nodes[0].cmd.Process.Pid, nodes[1].cmd.Process.Pid}
			var rss, anon, cpu [2]float64
			for i := range b.N {
				before := cpuTicks(b, pids)
				start := time.Now()
				time.Sleep(idleWindow) // the window CPU is measured over, not a wait for an event
				after := cpuTicks(b, pids)
				window := time.Since(start).Seconds()
				for j := range pids {
					rss[j], anon[j] = statusMB(b, pids[j], "VmRSS:"), statusMB(b, pids[j], "RssAnon:")
					cpu[j] = 100 * float64(after[j]-before[j]) / clockTicks / window
				}
				b.Logf("round %d: origin RSS %.1f MB (anon %.1f), CPU %.2f%%; worker RSS %.1f MB (anon %.1f), CPU %.2f%%; load %s",
					i+1, rss[0], anon[0], cpu[0], rss[1], anon[1], cpu[1], loadAvg())
			}
			if dir := os.Getenv("MESHD_IDLE_SMAPS"); dir != "" {
				for j, name := range []string{"origin", "worker"} {
					raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pids[j]))
					if err != nil {
						b.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, tc.timers+"-"+name+".smaps"), raw, 0o600); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(rss[0], "origin-rss-MB")
			b.ReportMetric(rss[1], "worker-rss-MB")
			b.ReportMetric(anon[1], "worker-anon-MB")
			b.ReportMetric(cpu[0], "origin-cpu%")
			b.ReportMetric(cpu[1], "worker-cpu%")
			Record(b, "rss-origin", "MB", rss[0])
			Record(b, "rss-worker", "MB", rss[1])
			Record(b, "cpu-origin", "%", cpu[0])
			Record(b, "cpu-worker", "%", cpu[1])
			if profDir != "" {
				for _, nd := range nodes {
					nd.Stop(b)
				}
			}
			if !tc.bounds {
				return
			}
			if rss[1] > 30 {
				b.Errorf("worker idle RSS %.1f MB, over the 30 MB bound", rss[1])
			}
			if cpu[1] >= 0.5 {
				b.Errorf("worker idle CPU %.2f%% of a core, not under 0.5%%", cpu[1])
			}
		})
	}
}

// setLogLevel rewrites the log_level of a node's config (NewNode writes
// debug) before it starts.
func setLogLevel(t testing.TB, nd *Node, level string) {
	t.Helper()
	raw, err := os.ReadFile(nd.Config)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(raw), "log_level: debug\n", "log_level: "+level+"\n", 1)
	if err := os.WriteFile(nd.Config, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

// idleWindow is how long BenchmarkIdleRSS measures idle CPU over.
const idleWindow = 10 * time.Second

// joinOnce joins a fresh worker and returns how long the join took and how
// long until every node in existing reached it.
func joinOnce(b *testing.B, n *Net, origin *Node, existing []*Node, name string) (*Node, time.Duration, time.Duration) {
	w := n.NewNode(name)
	w.Start(b)
	tok := origin.Admit(b, name)
	start := time.Now()
	w.MustCtl(b, "join", tok)
	joined := time.Since(start)
	ip := ""
	for _, x := range origin.Nodes(b) {
		if x.Name == name {
			ip = x.OverlayIP
		}
	}
	reachStart := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(existing))
	for _, e := range existing {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if e.Ping(b.Context(), ip) == nil {
					return
				}
			}
			errs <- fmt.Errorf("%s never reached %s (%s)", e.NodeName, name, ip)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return w, joined, time.Since(reachStart)
}

// rssMB is the resident set of a running meshd.
func rssMB(t testing.TB, nd *Node) float64 {
	t.Helper()
	return statusMB(t, nd.cmd.Process.Pid, "VmRSS:")
}

// statusMB is a field of /proc/PID/status in MB: VmRSS (resident),
// RssAnon (its anonymous part), RssFile.
func statusMB(t testing.TB, pid int, field string) float64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
