//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// cluster starts an origin and the given workers, inits the cluster and
// joins every worker; it returns the nodes, origin first.
func cluster(t testing.TB, n *Net, workers ...string) []*Node {
	t.Helper()
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	nodes := []*Node{origin}
	for _, name := range workers {
		w := n.NewNode(name)
		w.Start(t)
		w.MustCtl(t, "join", origin.Admit(t, name))
		nodes = append(nodes, w)
	}
	return nodes
}

// overlayIPs maps node name to overlay IP as the first node sees it.
func overlayIPs(t testing.TB, from *Node) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range from.Nodes(t) {
		out[n.Name] = n.OverlayIP
	}
	return out
}

// allPairsPing checks that every node reaches every other over the overlay.
func allPairsPing(t testing.TB, nodes []*Node, within time.Duration) {
	t.Helper()
	ips := overlayIPs(t, nodes[0])
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			Eventually(t, within, fmt.Sprintf("%s pings %s", a.NodeName, b.NodeName), func() error {
				return a.Ping(t.Context(), ips[b.NodeName])
			})
		}
	}
}

// allPairsPing6 is allPairsPing over the IPv6 overlay (issue 34: a
// cluster is dual-stack by default): every node lists an IPv6 overlay
// address for every other, and reaches it.
func allPairsPing6(t testing.TB, nodes []*Node, within time.Duration) {
	t.Helper()
	ips := map[string]string{}
	for _, n := range nodes[0].Nodes(t) {
		if n.OverlayIP6 == "" {
			t.Fatalf("%s lists no IPv6 overlay address for %s", nodes[0].NodeName, n.Name)
		}
		ips[n.Name] = n.OverlayIP6
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			Eventually(t, within, fmt.Sprintf("%s pings %s over IPv6", a.NodeName, b.NodeName), func() error {
				return a.Ping(t.Context(), ips[b.NodeName])
			})
		}
	}
}

// gossipState is the gossip column for name as seen from nd.
func gossipState(t testing.TB, nd *Node, name string) string {
	for _, n := range nd.Nodes(t) {
		if n.Name == name {
			return n.Gossip
		}
	}
	return "absent"
}

// gossipStateOf is gossipState for use off the test goroutine: a failed
// meshctl call reads as "unknown" instead of failing the test.
func gossipStateOf(t testing.TB, nd *Node, name string) string {
	var ns []apitype.Node
	if err := nd.CtlJSON(t.Context(), &ns, "nodes"); err != nil {
		return "unknown"
	}
	for _, n := range ns {
		if n.Name == name {
			return n.Gossip
		}
	}
	return "absent"
}

func TestOverlayFormsAndHeals(t *testing.T) {
	n := NewNet(t)
	nodes := cluster(t, n, "w1", "w2", "w3")

	// Every node lists four nodes, all alive in gossip.
	for _, nd := range nodes {
		Eventually(t, 5*time.Second, nd.NodeName+" sees 4 alive", func() error {
			var ns []apitype.Node
			if err := nd.CtlJSON(t.Context(), &ns, "nodes"); err != nil {
				return err
			}
			alive := 0
			for _, x := range ns {
				if x.Gossip == "alive" {
					alive++
				}
			}
			if alive != 4 {
				return fmt.Errorf("%d of %d alive: %+v", alive, len(ns), ns)
			}
			return nil
		})
	}
	allPairsPing(t, nodes, 5*time.Second)
	allPairsPing6(t, nodes, 5*time.Second)

	// A killed worker is seen as failed by every other node.
	victim := nodes[2]
	victim.Kill()
	for _, nd := range nodes {
		if nd == victim {
			continue
		}
		took := Eventually(t, 10*time.Second, nd.NodeName+" sees w2 failed", func() error {
			if s := gossipState(t, nd, victim.NodeName); s != "failed" {
				return fmt.Errorf("gossip state %q", s)
			}
			return nil
		})
		t.Logf("%s saw %s failed after %s", nd.NodeName, victim.NodeName, took.Round(time.Millisecond))
	}

	// Restarted, it comes back alive and reachable with no operator action.
	victim.Start(t)
	for _, nd := range nodes {
		Eventually(t, 10*time.Second, nd.NodeName+" sees w2 alive", func() error {
			if s := gossipState(t, nd, victim.NodeName); s != "alive" {
				return fmt.Errorf("gossip state %q", s)
			}
			return nil
		})
	}
	allPairsPing(t, nodes, 10*time.Second)

	// The whole cluster restarts and recovers.
	for _, nd := range nodes {
		nd.Stop(t)
	}
	for _, nd := range nodes {
		nd.Start(t)
	}
	allPairsPing(t, nodes, 20*time.Second)
	allPairsPing6(t, nodes, 10*time.Second)
}

// TestLeaveAndRemoveWithdraw: a worker that leaves is unjoined and
// withdrawn; a removed worker's certificates are blocked, so no node
// reaches it over the overlay any more, though its process still runs.
func TestLeaveAndRemoveWithdraw(t *testing.T) {
	n := NewNet(t)
	nodes := cluster(t, n, "w1", "w2", "w3")
	allPairsPing(t, nodes, 10*time.Second)
	ips := overlayIPs(t, nodes[0])
	origin, w1, w2, w3 := nodes[0], nodes[1], nodes[2], nodes[3]

	w3.MustCtl(t, "leave")
	var st apitype.Status
	if err := w3.CtlJSON(t.Context(), &st, "status"); err != nil || st.State != "unjoined" {
		t.Fatalf("w3 after leave: %+v, %v", st, err)
	}
	// Its record left, gossip no longer alive: w3 was out of the pool (a
	// worker's default), so gossip has no word on it ("unknown").
	Eventually(t, 10*time.Second, "origin sees w3 left", func() error {
		if r, _ := nodeRow(t, origin, "w3"); r.State != "left" || r.Gossip == "alive" {
			return fmt.Errorf("state %q, gossip %q", r.State, r.Gossip)
		}
		return nil
	})

	origin.MustCtl(t, "remove", "w2")
	removed := time.Now()
	// Issue 9: cut from the overlay on every member within 2 s of `remove`
	// returning (remove waits for the members' acknowledgements, and each
	// closes the tunnels of revoked certificates when it applies them).
	for _, from := range []*Node{origin, w1} {
		Eventually(t, time.Until(removed.Add(2*time.Second)), from.NodeName+" can no longer reach w2 within 2 s of remove", func() error {
			if from.Ping(t.Context(), ips["w2"]) == nil {
				return fmt.Errorf("%s still reaches w2", from.NodeName)
			}
			return nil
		})
		t.Logf("%s lost w2 by %s after remove returned", from.NodeName, time.Since(removed).Round(time.Millisecond))
	}
	if err := origin.Ping(t.Context(), ips["w1"]); err != nil {
		t.Fatalf("the others stay connected: %v", err)
	}
	_ = w2
}
