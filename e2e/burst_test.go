//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// Concurrent joins through three control nodes (issue 10): the collision
// of issue 9 (concurrent admissions retrying each other out of overlay IPs)
// must not come back, and a burst of joins must finish quickly.

// burstJoin is one worker's `meshctl join` in a burst.
type burstJoin struct {
	w          *Node
	minter     *Node    // the control node that minted its token (nil: a key's joins)
	args       []string // after `meshctl join`: the token, or --token-file with a key
	start, end time.Time
	code       int
	errs       string
	stderr     string        // meshctl's stderr, failed or not (warning lines)
	out        *stampedLines // stdout, each line with the time it arrived
}

func (j *burstJoin) took() time.Duration { return j.end.Sub(j.start) }

// stampedLines is an io.Writer that keeps each complete line with the time
// it was written: meshctl join streams one line per step as it happens.
type stampedLines struct {
	mu      sync.Mutex
	partial []byte
	lines   []stampedLine
}

type stampedLine struct {
	at   time.Time
	text string
}

func (s *stampedLines) Write(p []byte) (int, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.lines = append(s.lines, stampedLine{at: now, text: string(s.partial[:i])})
		s.partial = s.partial[i+1:]
	}
}

func (s *stampedLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, l := range s.lines {
		b.WriteString(l.text + "\n")
	}
	return b.String() + string(s.partial)
}

// first is the time of the first line starting with prefix.
func (s *stampedLines) first(prefix string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.HasPrefix(strings.TrimPrefix(l.text, "• "), prefix) {
			return l.at, true
		}
	}
	return time.Time{}, false
}

// burstWorkers creates and starts count unjoined workers named
// <prefix>01, <prefix>02, ... (stopCleanly: profiled when the net is).
func burstWorkers(t testing.TB, n *Net, prefix string, count int) []*Node {
	t.Helper()
	ws := make([]*Node, count)
	for i := range ws {
		ws[i] = n.NewNode(fmt.Sprintf("%s%02d", prefix, i+1))
		ws[i].Start(t)
	}
	stopCleanly(t, n, ws)
	return ws
}

// burstNet is a new net for a burst at its timers; with
// MESHD_BURST_PROFILE=DIR every node writes its CPU profile to
// DIR/<name>.cpu when the round ends (go tool pprof merges them: where a
// burst's CPU goes).
func burstNet(t testing.TB) (*Net, string) {
	n := NewNet(t)
	timers, defaultRaft := burstTimers()
	n.Timers, n.DefaultRaft = timers, defaultRaft
	n.ProfileDir = os.Getenv(burstEnv + "_PROFILE")
	return n, timers
}

// controlNice is the nice value the burst tests give the control nodes'
// processes (every thread). In a fleet each control node has a machine of
// its own; on this 2-core box 53 meshd processes share the cores, and at
// equal priority the 3 control nodes get 3/53 of them: the origin's
// overlay socket held 5 MB of unread packets (a joiner's handshake to it
// answered 19 s late), the raft leader lost its lease, and 5 to 16 of 50
// joins missed their 30 s confirmation (docs/performance.md).
const controlNice = -10

// prioritize sets every thread of each node's meshd to nice (a thread
// started later inherits its creator's). Linux's nice is per thread, so
// the walk is repeated until it finds no thread it has not set.
func prioritize(t testing.TB, nodes []*Node, nice int) {
	t.Helper()
	for _, nd := range nodes {
		done := map[string]bool{}
		for {
			tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", nd.cmd.Process.Pid))
			if err != nil {
				t.Fatalf("prioritize %s: %v", nd.NodeName, err)
			}
			more := false
			for _, task := range tasks {
				if done[task.Name()] {
					continue
				}
				tid, err := strconv.Atoi(task.Name())
				if err != nil {
					continue
				}
				if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
					t.Fatalf("prioritize %s thread %d: %v", nd.NodeName, tid, err)
				}
				done[task.Name()], more = true, true
			}
			if !more {
				break
			}
		}
	}
}

// stopCleanly stops nodes at the test's end, before the cleanups that
// kill them (cleanups run last first), failed or not, when the net
// profiles its nodes: a clean exit writes the profile.
func stopCleanly(t testing.TB, n *Net, nodes []*Node) {
	if n.ProfileDir == "" {
		return
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.Stop(t)
		}
	})
}

// joinBurst mints one token per worker, round-robin on the control nodes,
// then starts every worker's `meshctl join` at the same moment and waits
// for all of them (at most within).
func joinBurst(t testing.TB, controls, workers []*Node, within time.Duration) []*burstJoin {
	t.Helper()
	joins := make([]*burstJoin, len(workers))
	for i, w := range workers {
		c := controls[i%len(controls)]
		joins[i] = &burstJoin{w: w, minter: c, args: []string{c.Admit(t, w.NodeName)}, out: &stampedLines{}}
	}
	runBurst(t, joins, within)
	return joins
}

// runBurst starts every join's `meshctl join` at the same moment and
// waits for all of them (at most within).
func runBurst(t testing.TB, joins []*burstJoin, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for _, j := range joins {
		var errb bytes.Buffer
		cmd := j.w.Exec(ctx, filepath.Join(binDir, "meshctl"), append([]string{"--socket", j.w.Socket, "join"}, j.args...)...)
		cmd.Stdout, cmd.Stderr = j.out, &errb
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			j.start = time.Now()
			err := cmd.Run()
			j.end = time.Now()
			j.code, j.stderr = 0, errb.String()
			if err != nil {
				j.code = -1
				if cmd.ProcessState != nil {
					j.code = cmd.ProcessState.ExitCode()
				}
				j.errs = errb.String() + err.Error()
			}
		}()
	}
	close(gate)
	wg.Wait()
}

// checkBurst asserts what a burst of joins must leave behind: every join
// exited 0; every control node lists every worker active and alive in
// gossip within bound of the last join's exit; on every control node each
// worker is listed exactly once, at the overlay IP its join reported,
// with no overlay IP given twice (checkBurstTokens checks the tokens). It
// returns how long after the last exit the slowest control node listed
// every worker alive.
func checkBurst(t testing.TB, controls []*Node, joins []*burstJoin, bound time.Duration) time.Duration {
	t.Helper()
	failed := 0
	for _, j := range joins {
		if j.code != 0 {
			failed++
			t.Errorf("%s (%s): join exit %d after %s\n%s%s", j.w.NodeName, j.from(), j.code,
				j.took().Round(time.Millisecond), j.out, j.errs)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d concurrent joins failed", failed, len(joins))
	}
	var last time.Time
	for _, j := range joins {
		if j.end.After(last) {
			last = j.end
		}
	}
	// Every control node is watched at once, so that each one's time is
	// its own and not the sum of the waits before it.
	settled := make([]time.Duration, len(controls))
	errs := make([]error, len(controls))
	var wg sync.WaitGroup
	for i, c := range controls {
		wg.Go(func() {
			_, errs[i] = waitFor(t.Context(), burstWatch, func() error { return burstAlive(t, c, joins) })
			settled[i] = time.Since(last)
		})
	}
	wg.Wait()
	for i, c := range controls {
		if errs[i] != nil {
			t.Fatalf("%s does not list every worker active and alive %s after the last join exited: %v", c.NodeName, settled[i].Round(100*time.Millisecond), errs[i])
		}
		t.Logf("%s lists every worker active and alive %s after the last join exited", c.NodeName, settled[i].Round(100*time.Millisecond))
		if settled[i] > bound {
			t.Errorf("%s settled %s after the last join exited: the bound is %s", c.NodeName, settled[i].Round(100*time.Millisecond), bound)
		}
	}
	for _, c := range controls {
		ns := c.Nodes(t)
		names, ips := map[string]int{}, map[string]string{}
		for _, x := range ns {
			names[x.Name]++
			if other, dup := ips[x.OverlayIP]; dup || x.OverlayIP == "" {
				t.Fatalf("%s lists overlay IP %q for both %s and %s", c.NodeName, x.OverlayIP, other, x.Name)
			}
			ips[x.OverlayIP] = x.Name
		}
		for name, k := range names {
			if k != 1 {
				t.Fatalf("%s lists %s %d times", c.NodeName, name, k)
			}
		}
		if want := len(controls) + len(joins); len(ns) != want {
			t.Fatalf("%s lists %d nodes, want %d", c.NodeName, len(ns), want)
		}
		for _, x := range ns {
			for _, j := range joins {
				if x.Name == j.w.NodeName && !strings.Contains(j.out.String(), ", overlay "+x.OverlayIP+"\n") {
					t.Fatalf("%s lists %s at %s; its join said:\n%s", c.NodeName, x.Name, x.OverlayIP, j.out)
				}
			}
		}
	}
	return slices.Max(settled)
}

// burstAlive is nil when c lists every worker of joins active and alive in
// gossip. Safe to call from any goroutine.
func burstAlive(t testing.TB, c *Node, joins []*burstJoin) error {
	var ns []apitype.Node
	if err := c.CtlJSON(t.Context(), &ns, "nodes"); err != nil {
		return err
	}
	for _, j := range joins {
		found := false
		for _, x := range ns {
			if x.Name == j.w.NodeName {
				found = true
				if x.State != "active" || x.Gossip != "alive" {
					return fmt.Errorf("%s is %s, gossip %s", x.Name, x.State, x.Gossip)
				}
			}
		}
		if !found {
			return fmt.Errorf("%s not listed", j.w.NodeName)
		}
	}
	return nil
}

// burstSettle bounds how long after the last join exited every control
// node must list every worker active and alive in gossip; the 50-join
// bursts record the slowest control node's time (metric settle) for the
// bench report, whose target it is too.
const burstSettle = 10 * time.Second

// burstWatch is how long checkBurst keeps watching a control node that
// has not settled within its bound, so that a miss says by how much.
const burstWatch = 90 * time.Second

// from says where a join's token came from, for a failure's message.
func (j *burstJoin) from() string {
	if j.minter == nil {
		return "a key"
	}
	return "token minted on " + j.minter.NodeName
}

// checkBurstTokens asserts that each worker's token is the only one for
// its name, used, and consumed by that worker, and that the tokens were
// minted round-robin on every control node.
func checkBurstTokens(t testing.TB, controls []*Node, joins []*burstJoin) {
	t.Helper()
	var toks []apitype.Token
	if err := controls[0].CtlJSON(t.Context(), &toks, "tokens"); err != nil {
		t.Fatal(err)
	}
	minters := map[string]bool{}
	for _, j := range joins {
		var mine []apitype.Token
		for _, tk := range toks {
			if tk.Name == j.w.NodeName {
				mine = append(mine, tk)
			}
		}
		if len(mine) != 1 || mine[0].State != apitype.TokenUsed || mine[0].ConsumedBy != j.w.NodeName {
			t.Fatalf("tokens for %s: %+v, want one, used, consumed by it", j.w.NodeName, mine)
		}
		minters[mine[0].MintedBy] = true
	}
	if len(minters) != min(len(controls), len(joins)) {
		t.Fatalf("tokens minted by %d control nodes, want %d", len(minters), len(controls))
	}
}

// cpuSeconds is the CPU time (user and system) a running meshd has used.
func cpuSeconds(t testing.TB, nd *Node) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", nd.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, utime and stime fields 14 and 15, in clock ticks (100 Hz).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

// logCount is how many lines of the nodes' logs contain s.
func logCount(t testing.TB, nodes []*Node, s string) int {
	n := 0
	for _, nd := range nodes {
		b, err := os.ReadFile(nd.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(b, []byte(s))
	}
	return n
}

// cpuOf sums cpuSeconds over nodes.
func cpuOf(t testing.TB, nodes []*Node) float64 {
	sum := 0.0
	for _, nd := range nodes {
		sum += cpuSeconds(t, nd)
	}
	return sum
}

// burstStats are the figures of one burst: per-join latency (start of its
// meshctl to exit) and the total (first start to last exit).
type burstStats struct {
	min, p50, p90, max, total time.Duration
}

func statsOf(joins []*burstJoin) burstStats {
	ds := make([]time.Duration, len(joins))
	first, last := joins[0].start, joins[0].end
	for i, j := range joins {
		ds[i] = j.took()
		if j.start.Before(first) {
			first = j.start
		}
		if j.end.After(last) {
			last = j.end
		}
	}
	slices.Sort(ds)
	return burstStats{min: ds[0], p50: rank(ds, 50), p90: rank(ds, 90), max: ds[len(ds)-1], total: last.Sub(first)}
}

// rank is the nearest-rank percentile p of sorted ds.
func rank(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds)+99)/100 - 1
	return ds[max(i, 0)]
}

func (s burstStats) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("per join min %s p50 %s p90 %s max %s; first start to last exit %s",
		r(s.min), r(s.p50), r(s.p90), r(s.max), r(s.total))
}

// burstPhases are the steps meshctl join prints, in order; phaseReport
// tells, for each, how long joins spent getting there from the step before.
var burstPhases = []struct{ name, prefix string }{
	{"start to token checked", "token checked"},
	{"keys generated", "generated TLS and Nebula keys"},
	{"seed TLS verified", "seed verified"},
	{"admitted (token lookup, Admit, sign, RecordCerts)", "admitted as"},
	{"identity saved, runtime started", "identity saved"},
	{"node list fetched (strict read on a control node)", "node list:"},
	{"alive in gossip with a control node", "gossip: alive"},
	{"tunnel to a lighthouse", "overlay: tunnel"},
}

// phaseReport is, per phase, the median and the maximum over the joins of
// the time from the previous step's line (or the start) to this one's, and
// the same for the exit after the last line.
func phaseReport(joins []*burstJoin) string {
	var b strings.Builder
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	prev := make([]time.Time, len(joins))
	for i, j := range joins {
		prev[i] = j.start
	}
	line := func(name string, ds []time.Duration) {
		if len(ds) == 0 {
			return
		}
		slices.Sort(ds)
		fmt.Fprintf(&b, "  %-52s p50 %7s  max %7s\n", name, r(rank(ds, 50)), r(ds[len(ds)-1]))
	}
	for _, ph := range burstPhases {
		var ds []time.Duration
		for i, j := range joins {
			if at, ok := j.out.first(ph.prefix); ok {
				ds = append(ds, at.Sub(prev[i]))
				prev[i] = at
			}
		}
		line(ph.name, ds)
	}
	var ds []time.Duration
	for i, j := range joins {
		ds = append(ds, j.end.Sub(prev[i]))
	}
	line("last line to exit", ds)
	return b.String()
}

// TestJoinBurst: 20 workers join at once, tokens minted round-robin on 3
// control nodes, each worker in its own namespace. Every join is
// confirmed, no name or overlay IP is given twice, each token is used
// exactly once by its worker, every node is active. Before issue 9 a
// third of such a burst failed with X503205RFTAPL.
func TestJoinBurst(t *testing.T) {
	n := NewNet(t)
	controls := controlCluster(t, n)
	workers := burstWorkers(t, n, "b", 20)
	joins := joinBurst(t, controls, workers, 60*time.Second)
	checkBurst(t, controls, joins, burstSettle)
	checkBurstTokens(t, controls, joins)
	t.Logf("20 concurrent joins through 3 control nodes: %s", statsOf(joins))
}

// burstTimers are the timers of the 50-join burst: the suite's fast ones
// (gossip probe timeout 100 ms, raft heartbeat 300 ms), the harsher case:
// 53 meshd processes joining at once saturate this 2-core box for seconds,
// and starved members must not be taken for failed. MESHD_BURST_TIMERS=lan
// runs it with meshd's defaults (`timers: lan`, raft's 1 s heartbeat),
// what an operator bringing up a rack runs; `make bench` runs both, with
// the same targets.
func burstTimers() (string, bool) {
	if os.Getenv(burstEnv+"_TIMERS") == "lan" {
		return "lan", true
	}
	return "fast", false
}

// keepBurstLogs: with MESHD_BURST_LOGS=DIR, every node's log (debug
// level) is copied to DIR/<test>/<node>.log at the end of the round,
// passed or failed: what a burst's joins waited on, step by step.
func keepBurstLogs(t *testing.T, nodes []*Node) {
	dir := os.Getenv(burstEnv + "_LOGS")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("keep logs: %v", err)
			return
		}
		for _, nd := range nodes {
			if raw, err := os.ReadFile(nd.LogPath); err == nil {
				_ = os.WriteFile(filepath.Join(dir, nd.NodeName+".log"), raw, 0o644)
			}
		}
	})
}

// burstEnv runs TestJoinBurst50 and TestKeyBurst50 (make bench).
const burstEnv = "MESHD_BURST"

// burstRounds is how many rounds a 50-join burst runs: 3, or
// MESHD_BURST_ROUNDS.
func burstRounds() int {
	if v, err := strconv.Atoi(os.Getenv(burstEnv + "_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 3
}

// TestJoinBurst50 is issue 10's burst, three times in a row, each on a new
// cluster: 50 workers join at once through 3 control nodes, every join
// confirmed within 10 s from the first start to the last exit 0. It prints
// the latency distribution and where the joins spent their time, and at
// the end, for every round, failed or not, how many joins were not
// confirmed, by code, and the warnings the joins printed (issue 54's
// target: 0 unconfirmed in 5 rounds with the defaults, `make bench`'s lan
// run). It runs only with MESHD_BURST=1 (make bench): it starts 53 meshd
// processes.
func TestJoinBurst50(t *testing.T) {
	if os.Getenv(burstEnv) != "1" {
		t.Skip("set " + burstEnv + "=1 (make bench)")
	}
	const workers, bound = 50, 10 * time.Second
	rounds := make([]string, burstRounds())
	for round := range rounds {
		rounds[round] = "no burst"
		t.Run(fmt.Sprintf("round%d", round+1), func(t *testing.T) {
			neighbourRoom(t, 3+workers) // 53 hosts overflow the kernel's ARP table
			n, timers := burstNet(t)
			controls := controlCluster(t, n)
			stopCleanly(t, n, controls)
			prioritize(t, controls, controlNice)
			ws := burstWorkers(t, n, "b", workers)
			keepBurstLogs(t, append(controls, ws...))
			cpuC, cpuW := cpuOf(t, controls), cpuOf(t, ws)
			joins := joinBurst(t, controls, ws, 60*time.Second)
			cpuC, cpuW = cpuOf(t, controls)-cpuC, cpuOf(t, ws)-cpuW
			s, failed := statsOf(joins), failedCodes(joins)
			rounds[round] = fmt.Sprintf("%d of %d not confirmed %v, warnings %v; %s",
				total(failed), workers, failed, warningCodes(joins), s)
			t.Logf("%d concurrent joins through 3 control nodes (timers: %s): %s\n"+
				"CPU used during the burst: control nodes %.1f s, workers %.1f s (%.2f s each)\n"+
				"Nebula handshakes completed (all nodes' logs): %d; overlay reloads: %d\n"+
				"where the joins spent their time:\n%s",
				workers, timers, s, cpuC, cpuW, cpuW/float64(workers),
				logCount(t, append(controls, ws...), "Handshake message received"),
				logCount(t, append(controls, ws...), "overlay reloaded"), phaseReport(joins))
			recordBurst(t, timers, joins)
			head := rounds[round]
			rounds[round] = head + "; the check after the joins failed (see the round)"
			settled := checkBurst(t, controls, joins, burstSettle)
			recordSettle(t, timers, joins, settled)
			rounds[round] = fmt.Sprintf("%s; every worker alive on every control node %s after the last exit",
				head, settled.Round(100*time.Millisecond))
			checkBurstTokens(t, controls, joins)
			if s.total > bound {
				t.Fatalf("first start to last exit %s, want at most %s", s.total.Round(time.Millisecond), bound)
			}
		})
	}
	timers, _ := burstTimers()
	for i, s := range rounds {
		t.Logf("round %d (timers: %s): %s", i+1, timers, s)
	}
}
