//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// outOfPoolCluster is an origin (the one control node) and workers
// started with `gossip_pool: false`, at `timers: lan`.
func outOfPoolCluster(t *testing.T, n *Net, workers ...string) []*Node {
	t.Helper()
	nodes := cluster(t, n)
	for _, name := range workers {
		w := n.NewNode(name)
		appendConfig(t, w, "gossip_pool: false\n") // fleet_test.go
		w.Start(t)
		w.MustCtl(t, "join", nodes[0].Admit(t, name))
		nodes = append(nodes, w)
	}
	return nodes
}

// gossipShows waits until every node in on lists each of want's names
// with that gossip status (`meshctl nodes`: a control node's view, which
// judges a worker out of the pool by its record), and returns how long
// that took.
func gossipShows(t *testing.T, on []*Node, bound time.Duration, what string, want map[string]string) time.Duration {
	t.Helper()
	return Eventually(t, bound, what, func() error {
		for _, nd := range on {
			var ns []apitype.Node
			if err := nd.CtlJSON(t.Context(), &ns, "nodes"); err != nil {
				return err
			}
			for name, st := range want {
				i := slices.IndexFunc(ns, func(x apitype.Node) bool { return x.Name == name })
				if i < 0 || ns[i].State != "active" || ns[i].Gossip != st {
					return fmt.Errorf("%s's nodes: %s not active and %s (%v)", nd.NodeName, name, st, ns)
				}
			}
		}
		return nil
	})
}

// pings is nil when from answers a probe of each of names (`meshctl
// ping`) within 2 s.
func pings(t *testing.T, from *Node, names ...string) error {
	for _, name := range names {
		if out, errs, code := from.Ctl(t.Context(), "ping", name, "-c", "1", "-W", "2s"); code != 0 {
			return fmt.Errorf("%s pings %s: exit %d\n%s%s", from.NodeName, name, code, out, errs)
		}
	}
	return nil
}

// tunnelsOf are the names of nd's Nebula tunnels (status overlay.tunnels).
func tunnelsOf(t *testing.T, nd *Node) []string {
	var st apitype.Status
	if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil || st.Overlay == nil {
		t.Fatalf("%s status: %v", nd.NodeName, err)
	}
	var out []string
	for _, tn := range st.Overlay.Tunnels {
		out = append(out, tn.Name)
	}
	slices.Sort(out)
	return out
}

// TestWorkersOutOfPool (issue 54 item 3, step iv): one control node and
// three workers with `gossip_pool: false` at `timers: lan`. They join and
// are confirmed, run no gossip (status has none), and every node shows
// them alive; through a quiet 20 s a worker holds tunnels only to the
// control node and the peer it talked to, not to every worker; then
// every pair pings over the overlay. A killed worker is shown failed
// (the lighthouse verdict) on every node, and alive again once
// restarted. A removal is acknowledged by the workers out of the pool
// (by their facts: the revocation version they block), cuts the removed
// worker off, and leaves the others up.
func TestWorkersOutOfPool(t *testing.T) {
	n := NewNet(t)
	n.Timers = "lan"
	const interval = 2 * time.Second                           // lighthouse.interval at timers: lan
	bound := 3*interval + interval + interval + 10*time.Second // unheard, a look, a tick, slack for a shared box
	nodes := outOfPoolCluster(t, n, "w1", "w2", "w3")
	origin, w1, w2, w3 := nodes[0], nodes[1], nodes[2], nodes[3]
	alive := map[string]string{"origin": "alive", "w1": "alive", "w2": "alive", "w3": "alive"}
	took := gossipShows(t, nodes, 3*bound, "every node shows the workers alive", alive)
	t.Logf("timers lan: three workers out of the pool joined; every node shows them alive %v after the last join", took.Round(10*time.Millisecond))
	for _, w := range nodes[1:] {
		var st apitype.Status
		if err := w.CtlJSON(t.Context(), &st, "status"); err != nil {
			t.Fatal(err)
		}
		if st.Gossip != nil || !st.OutOfPool {
			t.Errorf("%s runs gossip out of the pool: %+v, or says it is in the pool (out_of_pool %v)", w.NodeName, st.Gossip, st.OutOfPool)
		}
	}

	// A quiet 20 s (memberlist at lan probes a member a second: in the
	// pool each worker would have probed every other several times), w1
	// having talked to w2 only: no worker gains a
	// tunnel to a worker it did not talk to.
	Eventually(t, 20*time.Second, "w1 pings w2", func() error { return pings(t, w1, "w2") })
	talked := map[string][]string{"w1": {"origin", "w2"}, "w2": {"origin", "w1"}, "w3": {"origin"}}
	tick := time.NewTicker(time.Second) // the observation window's pace, not a wait for an event
	defer tick.Stop()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); <-tick.C {
		for _, w := range nodes[1:] {
			for _, name := range tunnelsOf(t, w) {
				if !slices.Contains(talked[w.NodeName], name) {
					t.Fatalf("%s holds a tunnel to %s, which it never talked to (tunnels %v)", w.NodeName, name, tunnelsOf(t, w))
				}
			}
		}
	}
	var held []string
	for _, w := range nodes[1:] {
		held = append(held, fmt.Sprintf("%s: %s", w.NodeName, strings.Join(tunnelsOf(t, w), ",")))
	}
	t.Logf("after a quiet 20 s (timers lan), each worker's tunnels: %s", strings.Join(held, "; "))

	// Every pair pings over the overlay.
	names := []string{"origin", "w1", "w2", "w3"}
	for _, from := range nodes {
		others := slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == from.NodeName })
		Eventually(t, 20*time.Second, from.NodeName+" pings every other node", func() error { return pings(t, from, others...) })
	}

	// A killed worker is failed everywhere, then back.
	w3.Kill()
	failed := map[string]string{"w1": "alive", "w2": "alive", "w3": "failed"}
	took = gossipShows(t, nodes[:3], bound, "w3 killed: failed on every node", failed)
	t.Logf("timers lan: w3 killed; failed on origin, w1 and w2 after %v (bound %v)", took.Round(10*time.Millisecond), bound)
	w3.Start(t)
	took = gossipShows(t, nodes, bound, "w3 restarted: alive on every node", alive)
	t.Logf("w3 restarted: alive everywhere after %v", took.Round(10*time.Millisecond))

	// A removal: the others out of the pool acknowledge it by their
	// facts (the revocation version their Nebula blocks), the removed
	// worker is cut off, the others stay up.
	ips := overlayIPs(t, origin)
	var rm apitype.RemoveResponse
	start := time.Now()
	if err := origin.CtlJSON(t.Context(), &rm, "remove", "w3"); err != nil {
		t.Fatalf("remove w3: %v", err)
	}
	t.Logf("timers lan: remove w3 returned after %v: acknowledged %v (the last %v after the round began), pending %v",
		time.Since(start).Round(time.Millisecond), rm.Acked, rm.LastAck.Round(time.Millisecond), rm.Pending)
	if !slices.Contains(rm.Acked, "w1") || !slices.Contains(rm.Acked, "w2") || len(rm.Pending) != 0 {
		t.Errorf("remove: acknowledged %v, pending %v; want w1 and w2 acknowledged by their facts, none pending", rm.Acked, rm.Pending)
	}
	for _, from := range []*Node{origin, w1, w2} {
		Eventually(t, 10*time.Second, from.NodeName+" cannot reach removed w3", func() error {
			if err := from.Exec(t.Context(), "ping", "-c", "1", "-W", "1", ips["w3"]).Run(); err == nil {
				return fmt.Errorf("%s still reaches w3 at %s", from.NodeName, ips["w3"])
			}
			return nil
		})
	}
	for _, pair := range [][2]*Node{{w1, w2}, {w2, w1}, {w1, origin}, {w2, origin}, {origin, w1}} {
		Eventually(t, 10*time.Second, pair[0].NodeName+" still pings "+pair[1].NodeName, func() error { return pings(t, pair[0], pair[1].NodeName) })
	}
}
