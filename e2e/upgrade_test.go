//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// upgradeStepBound is how long one node's upgrade (stop the previous
// release, start the current one on the same state dir) may take until the
// cluster is whole again: a leader, the node active and alive, pings
// through it.
const upgradeStepBound = 20 * time.Second

// rolling is the state TestRollingUpgrade's background loops share with
// the test goroutine: which meshctl each node answers to, and which node is
// down for its upgrade.
type rolling struct {
	mu   sync.Mutex
	ctl  map[*Node]string // meshctl binary matching the node's meshd
	down *Node
}

func (r *rolling) ctlOf(nd *Node) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctl[nd], r.down != nd
}

// ctlWith runs meshctl binary bin in nd's namespace (Ctl with another
// binary, safe off the test goroutine).
func ctlWith(ctx context.Context, nd *Node, bin string, args ...string) (string, string, int) {
	return nd.ctl(ctx, bin, args...)
}

// TestRollingUpgrade (issue 12 item 7): a cluster of 3 control nodes (the
// origin holds the CA) and 2 workers runs the previous release
// (testdata/previous-release, built by previousBin) and is formed with its
// meshctl. While a loop admits and joins new workers (through the control
// nodes in turn, with the meshctl matching each node's meshd) and another
// pings between the workers over the overlay every 200 ms, every node is
// upgraded in place, the order docs/operations.md gives: the followers,
// the leader, the CA holder, the workers. After each node the cluster has a
// leader, the node is active and alive, and pings reach it. With versions
// mixed, `meshctl nodes` lists both versions and admission works through
// an old and a new control node. At the end every node runs the current
// version, every admitted node is active, and every control node holds the
// same ledger, which still holds everything admitted before the upgrade
// (the current build read the previous build's raft log). Lost pings and
// admissions that failed with NoLeader (retried) are measured; any other
// failed admission fails the test.
func TestRollingUpgrade(t *testing.T) {
	prev, err := previousBin()
	if err != nil {
		t.Fatal(err)
	}
	n := NewNet(t)
	r := &rolling{ctl: map[*Node]string{}}
	old := func(nd *Node) *Node {
		nd.Bin, nd.CtlBin = prev.Meshd, prev.Meshctl
		r.ctl[nd] = prev.Meshctl
		return nd
	}
	start := time.Now()
	origin := old(n.NewNode("origin"))
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	nodes := []*Node{origin}
	for _, name := range []string{"c2", "c3"} {
		c := old(n.NewNode(name))
		c.Start(t)
		c.MustCtl(t, "join", origin.Admit(t, name, "--role", "control"))
		nodes = append(nodes, c)
	}
	for _, name := range []string{"w1", "w2"} {
		w := old(n.NewNode(name))
		w.Start(t)
		w.MustCtl(t, "join", nodes[1].Admit(t, name))
		nodes = append(nodes, w)
	}
	controls, workers := nodes[:3], nodes[3:]
	names := []string{"origin", "c2", "c3", "w1", "w2"}
	for _, c := range controls {
		Eventually(t, 10*time.Second, c.NodeName+" sees the cluster whole", func() error { return whole(t, c, names) })
	}
	allPairsPing(t, nodes, 10*time.Second)
	for _, x := range origin.Nodes(t) {
		if x.Version != prev.Version {
			t.Fatalf("%s runs version %q, want the previous release's %q", x.Name, x.Version, prev.Version)
		}
	}
	// Work done before the upgrade, which the current build must read
	// back from the previous build's raft log: a token left unused and a
	// revoked one.
	origin.Admit(t, "spare")
	origin.Admit(t, "gone")
	var toks []apitype.Token
	if err := origin.CtlJSON(t.Context(), &toks, "tokens"); err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		if tk.Name == "gone" {
			origin.MustCtl(t, "tokens", "revoke", tk.ID)
		}
	}
	// The origin holds the CA and, having made the cluster, leads it:
	// stop it gracefully (it hands leadership off) and start it again, so
	// the leader and the CA holder are upgraded as two steps.
	origin.Stop(t)
	origin.Start(t)
	Eventually(t, 10*time.Second, "a leader other than the origin", func() error {
		if l := leaderOf(t, nodes[1]); l == "" || l == "origin" {
			return fmt.Errorf("leader %q", l)
		}
		return nil
	})
	before, err := ledgerOf(origin, t)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("previous release %s: cluster formed in %s", prev.Version, time.Since(start).Round(time.Millisecond))

	// The joiners the admission loop uses, made here (NewNode may fail
	// the test, which only the test goroutine may do). They run the
	// current build: a new machine gets the new release.
	var pool []*Node
	for i := range 7 {
		pool = append(pool, n.NewNode(fmt.Sprintf("j%d", i)))
	}
	ips := overlayIPs(t, origin)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var pingsSent, pingsLost atomic.Int64
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range [][2]*Node{{workers[0], workers[1]}, {workers[1], workers[0]}} {
				pingsSent.Add(1)
				if p[0].Ping(ctx, ips[p[1].NodeName]) != nil && ctx.Err() == nil {
					pingsLost.Add(1)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	var (
		admFailed atomic.Int64 // admissions that answered NoLeader and were retried
		joinRetry atomic.Int64 // joins run again after a failure
		loopMu    sync.Mutex
		loopErrs  []string
		joined    []*Node
		viaVer    = map[string]int{} // admissions by the version of the control node that served them
	)
	loopErr := func(f string, a ...any) {
		loopMu.Lock()
		defer loopMu.Unlock()
		loopErrs = append(loopErrs, fmt.Sprintf(f, a...))
	}
	wg.Go(func() {
		k := 0
		for _, j := range pool {
			// Admit through the next control node that is up.
			var tok string
			for tok == "" {
				if ctx.Err() != nil {
					return
				}
				c := controls[k%len(controls)]
				k++
				bin, up := r.ctlOf(c)
				if !up {
					continue
				}
				var res struct{ Token string }
				out, errs, code := ctlWith(ctx, c, bin, "admit", j.NodeName, "-o", "json")
				switch {
				case code == 0:
					if err := jsonUnmarshal(out, &res); err != nil || res.Token == "" {
						loopErr("admit %s via %s: no token in %q", j.NodeName, c.NodeName, out)
						return
					}
					tok = res.Token
					loopMu.Lock()
					viaVer[map[bool]string{true: "previous", false: "current"}[bin == prev.Meshctl]]++
					loopMu.Unlock()
				case codeOf(code, errs) == codes.NoLeader:
					admFailed.Add(1)
				case ctx.Err() != nil:
					return
				default:
					if _, up := r.ctlOf(c); !up {
						continue // it went down for its upgrade mid-call
					}
					loopErr("admit %s via %s: exit %d: %s", j.NodeName, c.NodeName, code, errs)
					return
				}
			}
			if err := j.start(ctx); err != nil {
				if ctx.Err() == nil {
					loopErr("start %s: %v", j.NodeName, err)
				}
				return
			}
			// The join goes to the token's seeds; one of them may be down
			// for its upgrade, or the leader may be changing: run it again
			// (the same token, the same keys) until it completes.
			_, err := waitFor(ctx, 30*time.Second, func() error {
				_, errs, code := j.Ctl(ctx, "join", tok)
				if code == 0 || codeOf(code, errs) == codes.AlreadyJoined {
					return nil
				}
				joinRetry.Add(1)
				return fmt.Errorf("exit %d: %s", code, errs)
			})
			if err != nil {
				if ctx.Err() == nil {
					loopErr("join %s: %v", j.NodeName, err)
				}
				return
			}
			loopMu.Lock()
			joined = append(joined, j)
			loopMu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	stopLoops := sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stopLoops)

	// The order: followers, the leader, the CA holder (the origin), the
	// workers. If the origin leads, it goes once, last of the control
	// nodes.
	leader := leaderOf(t, origin)
	if leader == "" {
		t.Fatal("no leader before the upgrade")
	}
	var order []*Node
	for _, c := range controls {
		if c.NodeName != leader && c != origin {
			order = append(order, c)
		}
	}
	if leader != origin.NodeName {
		order = append(order, byName(controls, leader))
	}
	order = append(order, origin)
	order = append(order, workers...)
	var (
		orderNames []string
		steps      []time.Duration // each node's upgrade, stop to whole again
	)
	for _, nd := range order {
		orderNames = append(orderNames, nd.NodeName)
	}
	t.Logf("upgrade order: %v (leader %s, CA holder origin)", orderNames, leader)

	for i, nd := range order {
		t0 := time.Now()
		lost0 := pingsLost.Load()
		r.mu.Lock()
		r.down = nd
		r.mu.Unlock()
		nd.Stop(t)
		nd.Bin, nd.CtlBin = "", ""
		nd.Start(t)
		r.mu.Lock()
		r.ctl[nd], r.down = filepath.Join(binDir, "meshctl"), nil
		r.mu.Unlock()
		if st := nd.status(t); st.Version != currentVersion {
			t.Fatalf("%s runs %q after its upgrade, want %q", nd.NodeName, st.Version, currentVersion)
		}
		for _, c := range controls {
			Eventually(t, upgradeStepBound, fmt.Sprintf("after %s: %s sees the cluster whole", nd.NodeName, c.NodeName),
				func() error { return whole(t, c, names) })
		}
		peer := workers[0]
		if nd == peer {
			peer = workers[1]
		}
		Eventually(t, upgradeStepBound, fmt.Sprintf("after %s: %s pings it and back", nd.NodeName, peer.NodeName), func() error {
			if err := peer.Ping(t.Context(), ips[nd.NodeName]); err != nil {
				return err
			}
			return nd.Ping(t.Context(), ips[peer.NodeName])
		})
		took := time.Since(t0)
		t.Logf("upgraded %s in %s (whole again), %d pings lost meanwhile", nd.NodeName, took.Round(time.Millisecond), pingsLost.Load()-lost0)
		steps = append(steps, took)

		if i == 0 {
			mixedVersions(t, nd, byName(controls, "origin"), prev.Version)
		}
		// The loop admits and joins a worker in this mix of versions
		// before the next node goes down.
		loopMu.Lock()
		had := len(joined)
		loopMu.Unlock()
		Eventually(t, upgradeStepBound, fmt.Sprintf("after %s: a worker admitted and joined", nd.NodeName), func() error {
			loopMu.Lock()
			defer loopMu.Unlock()
			if len(loopErrs) > 0 {
				t.Fatalf("admission loop: %v", loopErrs)
			}
			if len(joined) == had {
				return errors.New("none yet")
			}
			return nil
		})
	}
	stopLoops()
	loopMu.Lock()
	defer loopMu.Unlock()
	for _, e := range loopErrs {
		t.Error(e)
	}
	t.Logf("measured: %d of %d pings lost; %d admissions failed with NoLeader and were retried; %d joins run again; "+
		"%d workers admitted and joined during the upgrade (admitted by previous: %d, current: %d)",
		pingsLost.Load(), pingsSent.Load(), admFailed.Load(), joinRetry.Load(), len(joined), viaVer["previous"], viaVer["current"])
	Record(t, "upgrade_step", "ms", ms(slices.Max(steps)), msOf(steps)...)
	Record(t, "upgrade_pings_lost", "count", float64(pingsLost.Load()))
	Record(t, "upgrade_admissions_failed", "count", float64(admFailed.Load()))
	if len(joined) == 0 {
		t.Error("no worker was admitted and joined during the upgrade")
	}

	// The end: every node on the current version, every admitted node
	// active, the same ledger on every control node, holding what was
	// admitted before the upgrade unchanged.
	all := slices.Clone(names)
	for _, j := range joined {
		all = append(all, j.NodeName)
	}
	for _, c := range controls {
		Eventually(t, 10*time.Second, c.NodeName+" sees every node whole", func() error { return whole(t, c, all) })
	}
	var ref ledger
	for i, c := range controls {
		var l ledger
		Eventually(t, 5*time.Second, c.NodeName+" lists the ledger", func() error {
			var err error
			if l, err = ledgerOf(c, t); err != nil {
				return err
			}
			if i > 0 {
				if d := ref.diff(l); d != "" {
					return fmt.Errorf("differs from %s: %s", controls[0].NodeName, d)
				}
			}
			return nil
		})
		if i == 0 {
			ref = l
		}
	}
	for k, v := range before.nodes {
		if ref.nodes[k] != v {
			t.Errorf("node %s was %q before the upgrade, now %q", k, v, ref.nodes[k])
		}
	}
	for k, v := range before.tokens {
		if ref.tokens[k] != v {
			t.Errorf("token %s was %q before the upgrade, now %q", k, v, ref.tokens[k])
		}
	}
	// A node upgraded a moment ago may still be gossip's member at its old
	// (underlay) address until memberlist declares that one dead and takes
	// the new, overlay one (issue 27): its version follows within the
	// gossip failure bound.
	Eventually(t, n.gossipFailBound(len(nodes)), "every node lists the current version", func() error {
		for _, x := range origin.Nodes(t) {
			if x.Version != currentVersion {
				return fmt.Errorf("%s lists version %q, want %q", x.Name, x.Version, currentVersion)
			}
		}
		return nil
	})
	for _, x := range origin.Nodes(t) {
		if x.State != "active" {
			t.Errorf("%s is %q at the end, want active", x.Name, x.State)
		}
	}
	allPairsPing(t, nodes, 10*time.Second)
	// The current build took every file the previous one left (node.json,
	// identity, raft log, serf snapshot, a worker's nodes.json) as it was:
	// nothing refused, nothing moved aside.
	for _, nd := range nodes {
		b, err := os.ReadFile(nd.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, []byte(codes.StateCorrupt)); i >= 0 {
			t.Errorf("%s logged %s after its upgrade: %s", nd.NodeName, codes.StateCorrupt, b[i:min(len(b), i+300)])
		}
	}
	t.Logf("rolling upgrade done in %s", time.Since(start).Round(time.Millisecond))
}

// mixedVersions: with nd upgraded and other nodes still on the previous
// release, `meshctl nodes -o json` lists both versions, and a node is
// admitted through an old control node (with its meshctl) and a new one.
func mixedVersions(t *testing.T, upgraded, oldCtl *Node, prevVersion string) {
	t.Helper()
	vers := map[string][]string{}
	for _, x := range upgraded.Nodes(t) {
		vers[x.Version] = append(vers[x.Version], x.Name)
	}
	t.Logf("mixed versions: %v", vers)
	if len(vers[currentVersion]) == 0 || len(vers[prevVersion]) == 0 {
		t.Fatalf("meshctl nodes lists versions %v, want both %q and %q", vers, currentVersion, prevVersion)
	}
	for _, c := range []*Node{oldCtl, upgraded} {
		if c.Bin == "" && c != upgraded {
			t.Fatalf("%s is not on the previous release", c.NodeName)
		}
		name := "mixed-" + c.NodeName
		if tok := c.Admit(t, name); tok == "" {
			t.Fatalf("admit through %s: no token", c.NodeName)
		}
		if s := tokenState(t, c, name); s != apitype.TokenUnused {
			t.Fatalf("token for %s via %s is %q, want unused", name, c.NodeName, s)
		}
	}
}

func jsonUnmarshal(s string, v any) error {
	if s == "" {
		return errors.New("empty")
	}
	return json.Unmarshal([]byte(s), v)
}
