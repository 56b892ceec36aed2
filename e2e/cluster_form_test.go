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

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/bench/benchrec"
)

// Forming a cluster of real agents at a size, shared by the harnesses
// that need one: TestFormation (formation time, detection, memory) and
// BenchmarkIdleAgainstN (idle cost against N).

// scaleCluster is a formed cluster: 3 control nodes and size-3 workers,
// each in its own namespace, every one seeing all alive.
type scaleCluster struct {
	all, controls, workers []*Node
	// start is the first join's start; ctlDone the control nodes' joins'
	// end; lastJoin the last worker join's exit; formed when the last
	// node was first seen listing all alive.
	start, ctlDone, lastJoin, formed time.Time
	joinTook                         []time.Duration // each worker's `meshctl join`, sorted
	rounds                           int             // polling rounds until all alive everywhere
}

// formCluster builds a cluster of size nodes on n (its timers are n's,
// every node logging at info): all meshd are started and every token
// minted on the origin first; then the two control nodes join one after
// the other and the workers in concurrent batches of batch. It waits
// until every node's own gossip lists all size alive (within
// convergeBound of the last join), confirms it once with `meshctl nodes
// -o json` on every node, and records how many joined and how many saw
// all alive (params added). On failure it says which nodes stalled and
// keeps every log under logs (keepLogs).
func formCluster(tb testing.TB, n *Net, size, batch int, params map[string]string, logs string) *scaleCluster {
	tb.Helper()
	c := &scaleCluster{}
	setupStart := time.Now()
	add := func(name string) *Node {
		nd := n.NewNode(name)
		setLogLevel(tb, nd, "info") // debug logs of 100 nodes cost CPU the harnesses measure
		c.all = append(c.all, nd)
		return nd
	}
	origin := add("origin")
	origin.Start(tb)
	origin.MustCtl(tb, "init", "--cluster", "e2e")
	c.controls = []*Node{origin, add("c2"), add("c3")}
	c.workers = make([]*Node, size-3)
	for i := range c.workers {
		c.workers[i] = add(fmt.Sprintf("w%03d", i+1))
		appendConfig(tb, c.workers[i], n.WorkerConfig) // fleet_test.go; "" adds nothing
	}
	keepLogs(tb, c.all, logs)
	for _, nd := range c.all[1:] {
		nd.Start(tb)
	}
	ctlTokens := []string{origin.Admit(tb, "c2", "--role", "control"), origin.Admit(tb, "c3", "--role", "control")}
	tokens := make([]string, len(c.workers))
	for i, w := range c.workers {
		tokens[i] = origin.Admit(tb, w.NodeName)
	}
	tb.Logf("n=%d: %d meshd started and %d tokens minted in %s; load %.2f",
		size, size, size-1, time.Since(setupStart).Round(time.Millisecond), benchrec.Load())

	// The clock starts at the first join.
	c.start = time.Now()
	for i, ctl := range c.controls[1:] {
		ctl.MustCtl(tb, "join", ctlTokens[i])
	}
	c.ctlDone = time.Now()
	c.joinTook = make([]time.Duration, len(c.workers))
	for lo := 0; lo < len(c.workers); lo += batch {
		hi := min(lo+batch, len(c.workers))
		bStart := time.Now()
		failed := joinAll(tb, c.workers[lo:hi], tokens[lo:hi], c.joinTook[lo:hi])
		tb.Logf("n=%d: workers %d-%d joined in %s", size, lo+1, hi, time.Since(bStart).Round(time.Millisecond))
		if len(failed) > 0 {
			RecordWith(tb, params, "joined", "count", float64(3+hi-len(failed)))
			tb.Fatalf("n=%d: %d of the batch of workers %d-%d failed to join:\n%s", size, len(failed), lo+1, hi, strings.Join(failed, "\n"))
		}
	}
	c.lastJoin = time.Now()
	RecordWith(tb, params, "joined", "count", float64(size))
	slices.Sort(c.joinTook)

	seen, rounds := sweep(tb, c.all, c.lastJoin.Add(convergeBound), func(nd *Node) error {
		if !strings.Contains(n.WorkerConfig, "gossip_pool: true") { // workers out of the gossip pool (the default): no view of their own, and the control nodes' pool lacks them
			return seesAllAlive(tb.Context(), nd, size, ctlNodes)
		}
		return ownViewAllAlive(tb.Context(), nd, size)
	})
	RecordWith(tb, params, "seeing-all", "count", float64(len(seen)))
	if len(seen) < len(c.all) {
		reportStalled(tb, c.all, seen, size)
		tb.Fatalf("n=%d: %d of %d nodes did not see all %d alive within %s of the last join (joins took %s)",
			size, len(c.all)-len(seen), len(c.all), size, convergeBound, c.lastJoin.Sub(c.start).Round(time.Millisecond))
	}
	c.formed, c.rounds = latest(seen), rounds
	// The same through meshctl on every node, once.
	if ok, _ := sweep(tb, c.all, time.Now().Add(10*time.Second), func(nd *Node) error {
		return seesAllAlive(tb.Context(), nd, size, ctlNodes)
	}); len(ok) < len(c.all) {
		reportStalled(tb, c.all, ok, size)
		tb.Fatalf("n=%d: the local API said all alive everywhere, but meshctl nodes did not on %d nodes", size, len(c.all)-len(ok))
	}
	tb.Logf("n=%d: formed in %s (control joins %s, worker joins %s, then all alive everywhere %s later; %d polling rounds)",
		size, c.formed.Sub(c.start).Round(time.Millisecond), c.ctlDone.Sub(c.start).Round(time.Millisecond),
		c.lastJoin.Sub(c.ctlDone).Round(time.Millisecond), c.formed.Sub(c.lastJoin).Round(time.Millisecond), c.rounds)
	return c
}

// scaleSizes is the cluster sizes the environment variable env lists
// ("10,25"), or def when it is unset.
func scaleSizes(tb testing.TB, env string, def []int) []int {
	tb.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 4 || k > 250 {
			tb.Fatalf("%s: %q: want sizes between 4 and 250", env, f)
		}
		sizes = append(sizes, k)
	}
	return sizes
}

// joinAll runs the workers' joins at the same moment and waits for them;
// it fills took and returns a description of each failed join.
func joinAll(t testing.TB, ws []*Node, tokens []string, took []time.Duration) []string {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			out, errs, code := w.Ctl(ctx, "join", tokens[i])
			took[i] = time.Since(s)
			if code != 0 {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: exit %d after %s\n%s%s", w.NodeName, code, took[i].Round(time.Millisecond), out, errs))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// apiNodes is what `meshctl nodes -o json` prints, read from the same
// local API straight over nd's socket (a unix socket path works across
// network namespaces): no process per poll, so a sweep of 100 nodes takes
// milliseconds and observes state changes that closely.
func apiNodes(ctx context.Context, nd *Node) ([]apitype.Node, error) {
	c := localclient.Client{Socket: nd.Socket}
	return c.Nodes(ctx)
}

// ctlNodes is `meshctl nodes -o json` on nd.
func ctlNodes(ctx context.Context, nd *Node) ([]apitype.Node, error) {
	var ns []apitype.Node
	err := nd.CtlJSON(ctx, &ns, "nodes")
	return ns, err
}

// ownViewAllAlive: nd's own gossip (its status) has want members, all
// alive. (`meshctl nodes` on a worker shows the gossip view of the control
// node it asks; this is the worker's own.)
func ownViewAllAlive(ctx context.Context, nd *Node, want int) error {
	c := localclient.Client{Socket: nd.Socket}
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if st.Gossip == nil {
		return fmt.Errorf("no gossip yet")
	}
	if st.Gossip.Members != want || st.Gossip.Alive != want {
		return fmt.Errorf("its gossip has %d members, %d alive, want %d", st.Gossip.Members, st.Gossip.Alive, want)
	}
	return nil
}

// seesAllAlive: nd lists want nodes, every one alive in gossip.
func seesAllAlive(ctx context.Context, nd *Node, want int, list func(context.Context, *Node) ([]apitype.Node, error)) error {
	ns, err := list(ctx, nd)
	if err != nil {
		return err
	}
	var bad []string
	for _, x := range ns {
		if x.Gossip != "alive" {
			bad = append(bad, x.Name+" "+x.Gossip)
		}
	}
	if len(ns) != want || len(bad) > 0 {
		if len(bad) > 8 {
			bad = append(bad[:8], fmt.Sprintf("and %d more", len(bad)-8))
		}
		return fmt.Errorf("lists %d of %d, not alive: %v", len(ns), want, bad)
	}
	return nil
}

// pollers is how many calls sweep makes at once: enough that a sweep of
// 100 nodes is short, few enough not to starve the meshd processes being
// measured on 2 cores.
const pollers = 4

// sweep polls cond on every node, pollers at a time, round after round,
// until it has held once on each or deadline passes. It returns when each
// node was first seen to hold (the time its call returned: an upper
// bound, by up to one round) and the number of rounds. A node that
// satisfied cond is not polled again.
func sweep(t testing.TB, nodes []*Node, deadline time.Time, cond func(*Node) error) (map[*Node]time.Time, int) {
	seen := map[*Node]time.Time{}
	var mu sync.Mutex
	rounds := 0
	for len(seen) < len(nodes) && time.Now().Before(deadline) && t.Context().Err() == nil {
		rounds++
		sem := make(chan struct{}, pollers)
		var wg sync.WaitGroup
		for _, nd := range nodes {
			mu.Lock()
			_, done := seen[nd]
			mu.Unlock()
			if done {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if cond(nd) == nil {
					at := time.Now()
					mu.Lock()
					seen[nd] = at
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(seen) < len(nodes) {
			time.Sleep(20 * time.Millisecond) // between rounds: not a busy loop on the nodes' sockets
		}
	}
	return seen, rounds
}

// reportStalled says, for the nodes not in seen (at most 10), what they
// list and the end of their logs.
func reportStalled(t testing.TB, nodes []*Node, seen map[*Node]time.Time, size int) {
	shown := 0
	var names []string
	for _, nd := range nodes {
		if _, ok := seen[nd]; ok {
			continue
		}
		names = append(names, nd.NodeName)
		if shown == 10 {
			continue
		}
		shown++
		err := ownViewAllAlive(t.Context(), nd, size)
		raw, _ := os.ReadFile(nd.LogPath)
		lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		t.Logf("stalled %s: %v\nend of its log:\n%s", nd.NodeName, err, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	t.Logf("stalled nodes (%d): %s", len(names), strings.Join(names, " "))
}

// latest is the last of the times in seen.
func latest(seen map[*Node]time.Time) time.Time {
	var l time.Time
	for _, at := range seen {
		if at.After(l) {
			l = at
		}
	}
	return l
}

// neighbourRoom makes the kernel's ARP table big enough for hosts
// namespaces on one bridge, each talking to every other, and puts the old
// limits back when the test ends. The table is one for all network
// namespaces (gc_thresh* live only in the initial namespace), and the
// default hard limit, gc_thresh3 = 1024, is exceeded once about 33 hosts
// all talk to each other (33 × 32 entries): the kernel logs "neighbour:
// arp_cache: neighbor table overflow!", drops packets to peers it has no
// entry for, and TCP dials between the hosts time out. Every test that
// puts more than 32 hosts on a Net needs this (TestJoinBurst50 has 53).
// It also raises netdev_max_backlog, the per-CPU queue every packet
// between two namespaces passes through (1,000 by default; it dropped
// about 4,000 packets in this session's first 100-node runs, counted in
// /proc/net/softnet_stat): the hosts of a real cluster do not share it.
func neighbourRoom(t testing.TB, hosts int) {
	t.Helper()
	const neigh, backlog = "/proc/sys/net/ipv4/neigh/default/", "/proc/sys/net/core/netdev_max_backlog"
	want := map[string]int{neigh + "gc_thresh2": hosts * hosts, neigh + "gc_thresh3": 2 * hosts * hosts, backlog: 100 * hosts}
	for _, path := range []string{neigh + "gc_thresh3", neigh + "gc_thresh2", backlog} { // the hard limit first; restored last
		name := path
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		old, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			t.Fatalf("%s: %q", path, raw)
		}
		if old >= want[name] {
			continue
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(want[name])), 0o644); err != nil {
			t.Fatalf("raise %s to %d for %d hosts: %v", path, want[name], hosts, err)
		}
		t.Cleanup(func() { _ = os.WriteFile(path, []byte(strconv.Itoa(old)), 0o644) })
	}
}

// keepLogs: when the test fails, every node's log is copied to
// $MESHD_SCALE_LOGS/<label>/ (default build/bench/scale-logs; TestFormation's
// label is n=<size>) and cut to its last lines, so that the harness's dump
// of every log on failure stays readable at 100 nodes. (Cleanups run
// last-registered first: this runs before the nodes' own.)
func keepLogs(t testing.TB, nodes []*Node, label string) {
	dir := os.Getenv(scaleEnv + "_LOGS")
	if dir == "" {
		dir = filepath.Join("..", "build", "bench", "scale-logs")
	}
	dir = filepath.Join(dir, label)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, nd := range nodes {
			nd.Kill()
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("keep logs: %v", err)
			return
		}
		for _, nd := range nodes {
			raw, err := os.ReadFile(nd.LogPath)
			if err != nil {
				continue
			}
			_ = os.WriteFile(filepath.Join(dir, nd.NodeName+".log"), raw, 0o644)
			lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
			_ = os.WriteFile(nd.LogPath, []byte(strings.Join(lines[max(0, len(lines)-5):], "\n")+"\n"), 0o600)
		}
		abs, _ := filepath.Abs(dir)
		t.Logf("full logs of the %d nodes in %s (below: the last 5 lines of each)", len(nodes), abs)
	})
}
