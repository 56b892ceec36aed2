//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 54 item 5's target: "with one control node and 40 workers, 10
// more join at once with no failure". Measured on main 8b0a8d4, such a
// burst failed a join with X503530UDPBLK (a STUN answer came late) in one
// run and X503104SEEDUN in another, while UDP and the seed were fine: a
// busy control node's slow answer taken for a blocked network.

// Sizes of TestJoinsOnBusyControl: one control node, busyIdle idle
// workers, then busyJoiners joining at once, twice.
const (
	busyIdle    = 40
	busyJoiners = 10
)

// busyRest is how long the 41-node cluster rests after every node lists
// all alive and before the burst: the formation's own work (memberlist's
// retransmits of the joins, the admissions' raft entries, the first
// push-pull after the last join at 30 s) has ended and the workers are
// idle, as in BenchmarkIdleAgainstN's settle.
const busyRest = 30 * time.Second

// busyRoundsEnv is how many rounds TestJoinsOnBusyControl runs, each on
// a new cluster: 1, or MESHD_SCALE_ROUNDS.
const busyRoundsEnv = scaleEnv + "_ROUNDS"

// busyBurst is what one burst of TestJoinsOnBusyControl measured.
type busyBurst struct {
	stats    burstStats
	failed   map[string]int // failed joins by code
	warnings map[string]int // warning lines of the joins by code
	settle   time.Duration  // last exit to the control node listing every node alive
	cpu      float64        // the control node's CPU seconds during the burst
	load     string         // load average when the burst began
	done     bool           // the burst ran
}

func (b busyBurst) String() string {
	if !b.done {
		return "did not run"
	}
	return fmt.Sprintf("%d of %d joins failed %v, warnings %v; %s; control node CPU %.1f s during the burst, load %s; all alive on it %s after the last exit",
		total(b.failed), busyJoiners, b.failed, b.warnings, b.stats, b.cpu, b.load, b.settle.Round(100*time.Millisecond))
}

// busyRound is one round: the formation, then the two bursts.
type busyRound struct {
	formed        time.Duration // first idle worker's join to the control node listing all alive
	plain, stalls busyBurst
}

// busyStall is how long the control node is stopped (SIGSTOP) as the
// second burst's joins start: longer than a join's path check's first
// UDP exchange (3 s, agent/preflight's netcheckTimeout), so that every
// join's STUN request goes unanswered, its TCP probe of the seed answers
// once the control node runs again, and the second exchange gets the
// answer late: the case that failed joins with OverlayUDPBlocked before
// issue 54 item 5, now a NetcheckSlow warning. Stops of 1.5 s (as in
// TestJoinWhileSeedStopped) and 2.5 s ended inside the first exchange:
// every STUN answer came within it, no warning.
const busyStall = 3500 * time.Millisecond

// TestJoinsOnBusyControl: one control node and 40 idle workers, formed
// with meshd's defaults (`timers: lan`, raft at its own timing, log level
// info), each node in its own namespace with its own underlay address;
// after a rest (busyRest), 10 more workers, each from its own namespace,
// run `meshctl join` at the same moment with tokens minted on the control
// node; then 10 more the same way while the control node is stopped for
// busyStall from the moment they start. In each burst every join must
// exit 0 (confirmed) and the control node must list every node active and
// alive in gossip, each joiner at the overlay IP its join said, within
// burstSettle of the last exit. The control node runs at the workers'
// priority (not prioritize's nice): the busy control node is the case.
// It prints the joins' times (min, p50, p90, max), where they spent them,
// the slowest join's steps, the failed joins' codes and every warning
// code the joins printed (SeedSlow, NetcheckSlow). It runs only with
// MESHD_SCALE=1 (make bench); MESHD_SCALE_ROUNDS=N runs N rounds, each on
// a new cluster (about 90 s each here); MESHD_BURST_LOGS=DIR keeps every
// node's log of every round (keepBurstLogs).
func TestJoinsOnBusyControl(t *testing.T) {
	if os.Getenv(scaleEnv) != "1" {
		t.Skip("set " + scaleEnv + "=1 (make bench): it starts 61 meshd processes")
	}
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv(busyRoundsEnv)); err == nil && v > 0 {
		rounds = v
	}
	got := make([]busyRound, rounds)
	for i := range got {
		t.Run(fmt.Sprintf("round%d", i+1), func(t *testing.T) { joinsOnBusyControl(t, &got[i]) })
	}
	for i, r := range got {
		t.Logf("round %d: formed in %s\n  10 at once: %s\n  10 at once, control node stopped %s: %s",
			i+1, r.formed.Round(time.Millisecond), r.plain, busyStall, r.stalls)
	}
}

// joinsOnBusyControl is one round; it fills r as it goes.
func joinsOnBusyControl(t *testing.T, r *busyRound) {
	neighbourRoom(t, 1+busyIdle+2*busyJoiners)
	n := NewNet(t)
	n.Timers, n.DefaultRaft = "lan", true
	add := func(name string) *Node {
		nd := n.NewNode(name)
		setLogLevel(t, nd, "info")
		nd.Start(t)
		return nd
	}
	origin := add("origin")
	origin.MustCtl(t, "init", "--cluster", "e2e")
	idle := make([]*Node, busyIdle)
	for i := range idle {
		idle[i] = add(fmt.Sprintf("w%02d", i+1))
	}
	first, second := make([]*Node, busyJoiners), make([]*Node, busyJoiners)
	for i := range first {
		first[i], second[i] = add(fmt.Sprintf("j%02d", i+1)), add(fmt.Sprintf("s%02d", i+1))
	}
	all := slices.Concat([]*Node{origin}, idle, first, second)
	keepLogs(t, all, strings.ReplaceAll(t.Name(), "/", "-"))
	keepBurstLogs(t, all) // MESHD_BURST_LOGS=DIR: every round's logs, passed or failed

	// The idle workers join 10 at a time, as TestFormation's do.
	tokens := make([]string, len(idle))
	for i, w := range idle {
		tokens[i] = origin.Admit(t, w.NodeName)
	}
	start := time.Now()
	took := make([]time.Duration, len(idle))
	for lo := 0; lo < len(idle); lo += 10 {
		hi := min(lo+10, len(idle))
		if failed := joinAll(t, idle[lo:hi], tokens[lo:hi], took[lo:hi]); len(failed) > 0 {
			t.Fatalf("forming: %d of the idle workers %d-%d failed to join:\n%s", len(failed), lo+1, hi, strings.Join(failed, "\n"))
		}
	}
	// Formed when the control node lists all 41 alive. A worker's own
	// view may lag: one that joins while a member is suspect does not
	// learn of that member from the push-pull (memberlist ignores a
	// suspect it has never heard of) and misses its refutation's
	// broadcast if it came before, until a push-pull with a node that
	// lists it alive (every 60 s at 41 members with `timers: lan`); it is
	// counted after the rest, not waited for.
	formed := append([]*Node{origin}, idle...)
	if _, err := waitFor(t.Context(), convergeBound, func() error {
		return seesAllAlive(t.Context(), origin, len(formed), apiNodes)
	}); err != nil {
		t.Fatalf("forming: origin does not list all %d alive within %s of the last join: %v", len(formed), convergeBound, err)
	}
	r.formed = time.Since(start)
	t.Logf("1 control node and %d workers formed in %s (timers lan, raft default); resting %s", busyIdle, r.formed.Round(time.Millisecond), busyRest)
	select {
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	case <-time.After(busyRest): // the formation's work ending: the workers idle
	}
	complete, _ := sweep(t, formed, time.Now().Add(time.Second), func(nd *Node) error { return ownViewAllAlive(t.Context(), nd, len(formed)) })
	t.Logf("after the rest, %d of %d nodes' own gossip lists all %d alive", len(complete), len(formed), len(formed))

	busyJoin(t, origin, first, len(formed)+len(first), 0, &r.plain)
	busyJoin(t, origin, second, len(formed)+len(first)+len(second), busyStall, &r.stalls)
}

// busyJoin is one burst of joiners through the control node origin,
// which is stopped for stall as they start (0: not stopped); the cluster
// has size nodes after it. It fills b, logs and records the figures,
// and fails the test when a join fails or origin does not list every
// node alive in time.
func busyJoin(t *testing.T, origin *Node, joiners []*Node, size int, stall time.Duration, b *busyBurst) {
	params := map[string]string{"timers": "lan", "controls": "1", "idle": strconv.Itoa(busyIdle)}
	what := fmt.Sprintf("%d joins at once through 1 control node with %d idle workers", len(joiners), size-1-len(joiners))
	if stall > 0 {
		params["stall"] = stall.String()
		what += fmt.Sprintf(", the control node stopped %s as they start", stall)
	}
	joins := make([]*burstJoin, len(joiners))
	for i, w := range joiners {
		joins[i] = &burstJoin{w: w, minter: origin, args: []string{origin.Admit(t, w.NodeName)}, out: &stampedLines{}}
	}
	cpu := cpuSeconds(t, origin)
	b.load = loadAvg()
	if stall > 0 {
		if err := origin.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP origin: %v", err)
		}
		cont := time.AfterFunc(stall, func() { _ = origin.cmd.Process.Signal(syscall.SIGCONT) })
		t.Cleanup(func() {
			if cont.Stop() { // the test ended first: never leave it stopped
				_ = origin.cmd.Process.Signal(syscall.SIGCONT)
			}
		})
	}
	runBurst(t, joins, 90*time.Second)
	b.cpu, b.done = cpuSeconds(t, origin)-cpu, true
	b.stats, b.failed, b.warnings = statsOf(joins), failedCodes(joins), warningCodes(joins)
	t.Logf("%s (timers lan, raft default, load %s when they began): %s\n"+
		"failed: %v; warnings: %v; the control node's CPU during the burst: %.1f s\nwhere the joins spent their time:\n%s",
		what, b.load, b.stats, b.failed, b.warnings, b.cpu, phaseReport(joins))
	slowest := slices.MaxFunc(joins, func(x, y *burstJoin) int { return cmp.Compare(x.took(), y.took()) })
	t.Logf("the slowest join, %s (%s):\n%s%s", slowest.w.NodeName, slowest.took().Round(time.Millisecond), slowest.out.since(slowest.start), slowest.stderr)
	recordBusy(t, params, b, joins)
	for _, j := range joins {
		if j.code != 0 {
			t.Errorf("%s: join exit %d after %s\n%s%s", j.w.NodeName, j.code, j.took().Round(time.Millisecond), j.out, j.errs)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Confirmed and alive: the control node lists all size nodes alive,
	// the joiners active, each at the overlay IP its join said.
	last := joins[0].end
	for _, j := range joins {
		if j.end.After(last) {
			last = j.end
		}
	}
	_, err := waitFor(t.Context(), burstWatch, func() error {
		if err := burstAlive(t, origin, joins); err != nil {
			return err
		}
		return seesAllAlive(t.Context(), origin, size, ctlNodes)
	})
	b.settle = time.Since(last)
	RecordWith(t, params, "settle", "ms", ms(b.settle))
	if err != nil {
		t.Fatalf("origin does not list all %d alive %s after the last join exited: %v", size, b.settle.Round(100*time.Millisecond), err)
	}
	if b.settle > burstSettle {
		t.Errorf("origin listed every node alive %s after the last exit: the bound is %s", b.settle.Round(100*time.Millisecond), burstSettle)
	}
	for _, x := range origin.Nodes(t) {
		for _, j := range joins {
			if x.Name == j.w.NodeName && !strings.Contains(j.out.String(), ", overlay "+x.OverlayIP+"\n") {
				t.Fatalf("origin lists %s at %s; its join said:\n%s", x.Name, x.OverlayIP, j.out)
			}
		}
	}
}

// failedCodes counts the failed joins by the code meshctl printed.
func failedCodes(joins []*burstJoin) map[string]int {
	out := map[string]int{}
	for _, j := range joins {
		if j.code != 0 {
			out[string(codeOf(j.code, j.stderr))]++
		}
	}
	return out
}

// warningCodes counts the joins' warnings by code: meshctl's warning
// lines ("warning X200795SEEDSL: ...", stderr) and the steps that warn
// ("• netcheck udp warn X200542UDPSLW: ...", stdout).
func warningCodes(joins []*burstJoin) map[string]int {
	out := map[string]int{}
	for _, j := range joins {
		for line := range strings.SplitSeq(j.stderr, "\n") {
			if rest, ok := strings.CutPrefix(line, "warning "); ok {
				code, _, _ := strings.Cut(rest, ":")
				out[code]++
			}
		}
		for _, m := range stepWarning.FindAllStringSubmatch(j.out.String(), -1) {
			out[m[1]]++
		}
	}
	return out
}

// stepWarning is a step line of `meshctl join` that warns, with its code.
var stepWarning = regexp.MustCompile(`(?m)^• .* warn (X[0-9]{6}[A-Z]{6}): `)

// recordBusy records a round's figures for the bench report: every
// join's time as samples (the value is the median), the slowest, the
// first start to the last exit, the failed joins and the warnings.
func recordBusy(t testing.TB, params map[string]string, r *busyBurst, joins []*burstJoin) {
	t.Helper()
	ds := make([]time.Duration, len(joins))
	for i, j := range joins {
		ds[i] = j.took()
	}
	RecordWith(t, params, "join", "ms", ms(r.stats.p50), msOf(ds)...)
	RecordWith(t, params, "join-max", "ms", ms(r.stats.max))
	RecordWith(t, params, "total", "ms", ms(r.stats.total))
	RecordWith(t, params, "failed", "count", float64(total(r.failed)))
	RecordWith(t, params, "warnings", "count", float64(total(r.warnings)))
	RecordWith(t, params, "control-cpu", "s", r.cpu)
}

// total is the sum of a count by code.
func total(byCode map[string]int) int {
	k := 0
	for _, v := range byCode {
		k += v
	}
	return k
}

// since is every line with the time it arrived after start
// ("+0.412s node list: ...").
func (s *stampedLines) since(start time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, l := range s.lines {
		fmt.Fprintf(&b, "+%.3fs %s\n", l.at.Sub(start).Seconds(), l.text)
	}
	return b.String()
}
