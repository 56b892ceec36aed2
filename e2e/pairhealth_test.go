//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// pairView is what nd shows of pair health: the members its status says
// it cannot reach (with the PairUnreachable warning's detail, "" without
// one), and its meshd_overlay_unreachable_peers.
type pairView struct {
	unreachable []string
	warning     string
	metric      float64
}

func pairHealthOf(t testing.TB, nd *Node) (pairView, error) {
	var st apitype.Status
	if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil {
		return pairView{}, err
	}
	var v pairView
	if st.Overlay != nil {
		v.unreachable = st.Overlay.Unreachable
	}
	for _, w := range st.Warnings {
		if w.Code == codes.PairUnreachable {
			v.warning = w.Detail
		}
	}
	m, err := scrape(t.Context(), nd, "127.0.0.1:9464")
	if err != nil {
		return v, err
	}
	got, ok := m["meshd_overlay_unreachable_peers"]
	if !ok {
		return v, fmt.Errorf("%s serves no meshd_overlay_unreachable_peers", nd.NodeName)
	}
	v.metric = got
	return v, nil
}

// pairMarks is `meshctl nodes` on nd: each node some member cannot reach
// ("name<-from,from "), and each node's gossip status.
func pairMarks(t testing.TB, nd *Node) (marks string, gossip map[string]string, err error) {
	var rows []apitype.Node
	if err := nd.CtlJSON(t.Context(), &rows, "nodes"); err != nil {
		return "", nil, err
	}
	gossip = map[string]string{}
	for _, r := range rows {
		gossip[r.Name] = r.Gossip
		if len(r.UnreachableFrom) > 0 {
			marks += r.Name + "<-" + strings.Join(r.UnreachableFrom, ",") + " "
		}
	}
	return marks, gossip, nil
}

// allAlive fails unless gossip, as every node of on sees it, shows every
// node of names alive.
func allAlive(t testing.TB, on []*Node, names ...string) error {
	for _, nd := range on {
		_, g, err := pairMarks(t, nd)
		if err != nil {
			return err
		}
		for _, name := range names {
			if g[name] != "alive" {
				return fmt.Errorf("gossip on %s shows %s %q", nd.NodeName, name, g[name])
			}
		}
	}
	return nil
}

// TestPairHealthOneWayCut is issue 28 item 4: a node that drops only the
// packets of one other node (an nft rule in its namespace) breaks the
// overlay between the two both ways, while gossip shows both alive on
// every node (memberlist's indirect probes go through the others). Each
// end's own probes find the other unreachable: `meshctl status` there
// warns PairUnreachable naming it (status.overlay.unreachable),
// meshd_overlay_unreachable_peers is 1, and `meshctl nodes` marks the
// pair (on the cutting node its own view, on a control node both ends);
// with the rule deleted every sign clears. Once for a follower dropping
// the raft leader's packets (the probe), once for a worker
// dropping a control node's (its report reaches the view through another
// control node; the worker, out of the gossip pool by default, is not
// probed by the control nodes, so only its own side shows the cut).
func TestPairHealthOneWayCut(t *testing.T) {
	n := NewNet(t)
	n.ExtraConfig = "metrics_addr: 127.0.0.1:9464\n" // each namespace has its own loopback
	nodes := controlCluster(t, n, "w1")
	var leader *Node
	Eventually(t, 10*time.Second, "a raft leader", func() error {
		if leader = byName(nodes, leaderOf(t, nodes[0])); leader == nil {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	var followers []*Node
	for _, nd := range nodes[:3] {
		if nd != leader {
			followers = append(followers, nd)
		}
	}
	w1 := nodes[3]
	names := []string{"origin", "c2", "c3", "w1"}
	Eventually(t, 15*time.Second, "every node alive, nothing unreachable", func() error {
		for _, nd := range nodes {
			v, err := pairHealthOf(t, nd)
			if err != nil {
				return err
			}
			if v.unreachable != nil || v.warning != "" || v.metric != 0 {
				return fmt.Errorf("%s: %+v", nd.NodeName, v)
			}
		}
		if marks, _, err := pairMarks(t, leader); err != nil || marks != "" {
			return fmt.Errorf("nodes on %s marks %q (%v)", leader.NodeName, marks, err)
		}
		return allAlive(t, nodes, names...)
	})

	// cut makes cutter drop every packet from from, checks what each end
	// and the node lists show, deletes the rule and checks that it all
	// clears. look is a control node other than both, whose `meshctl
	// nodes` marks both ends; on a control node cutter its own view marks
	// from (the other end's report cannot reach it).
	controls := nodes[:3]
	// A worker out of the gossip pool (the default) probes the control
	// nodes, and they do not probe it (no timer loop over every worker):
	// when the cutter is such a worker only its side shows the cut, and
	// only its report marks the pair.
	cut := func(t *testing.T, cutter, from, look *Node, cutterIsControl bool) {
		sides := [][2]*Node{{cutter, from}, {from, cutter}}
		if !cutterIsControl {
			sides = sides[:1]
		}
		cutter.DropFrom(from.IP)
		start := time.Now()
		healed := false
		defer func() {
			if !healed {
				cutter.Undrop()
			}
		}()
		for _, side := range sides {
			nd, other := side[0], side[1]
			Eventually(t, 20*time.Second, nd.NodeName+" shows "+other.NodeName+" unreachable", func() error {
				v, err := pairHealthOf(t, nd)
				if err != nil {
					return err
				}
				if !slices.Equal(v.unreachable, []string{other.NodeName}) || v.metric != 1 ||
					!strings.Contains(v.warning, "cannot reach "+other.NodeName+" over the overlay") {
					return fmt.Errorf("%+v", v)
				}
				return nil
			})
			t.Logf("%s warns %s, meshd_overlay_unreachable_peers 1, %s after the cut", nd.NodeName, codes.PairUnreachable,
				time.Since(start).Round(time.Millisecond))
		}
		// The text form: the warning with its code on stderr, exit 0,
		// and the member named in the status.
		out, errs, code := cutter.Ctl(t.Context(), "status")
		if code != 0 || !strings.Contains(errs, "warning "+string(codes.PairUnreachable)+": ") ||
			!strings.Contains(out, "unreachable:") {
			t.Fatalf("meshctl status on %s: exit %d\n%s%s", cutter.NodeName, code, out, errs)
		}
		want := map[*Node][]string{look: {from.NodeName + "<-" + cutter.NodeName + " "}}
		if cutterIsControl {
			want[look] = append(want[look], cutter.NodeName+"<-"+from.NodeName+" ")
			want[cutter] = []string{from.NodeName + "<-" + cutter.NodeName + " "}
		}
		Eventually(t, 20*time.Second, "meshctl nodes marks the pair", func() error {
			for nd, subs := range want {
				marks, _, err := pairMarks(t, nd)
				if err != nil {
					return err
				}
				for _, sub := range subs {
					if !strings.Contains(marks, sub) {
						return fmt.Errorf("nodes on %s marks %q, want %q in it", nd.NodeName, marks, sub)
					}
				}
			}
			return nil
		})
		t.Logf("meshctl nodes marks the pair %s after the cut", time.Since(start).Round(time.Millisecond))
		// Why nothing showed it before: gossip on every control node
		// shows every node alive, both ends included.
		Eventually(t, 5*time.Second, "gossip shows every node alive while the pair is cut", func() error {
			return allAlive(t, controls, names...)
		})
		out, _, code = look.Ctl(t.Context(), "nodes")
		if code != 0 || !strings.Contains(out, "! "+from.NodeName+": unreachable over the overlay from "+cutter.NodeName) {
			t.Errorf("meshctl nodes on %s: exit %d\n%s", look.NodeName, code, out)
		}

		cutter.Undrop()
		healed = true
		start = time.Now()
		Eventually(t, 20*time.Second, "every sign of the cut clears", func() error {
			for _, nd := range []*Node{cutter, from} {
				v, err := pairHealthOf(t, nd)
				if err != nil {
					return err
				}
				if v.unreachable != nil || v.warning != "" || v.metric != 0 {
					return fmt.Errorf("%s: %+v", nd.NodeName, v)
				}
			}
			for nd := range want {
				if marks, _, err := pairMarks(t, nd); err != nil || marks != "" {
					return fmt.Errorf("nodes on %s marks %q (%v)", nd.NodeName, marks, err)
				}
			}
			return nil
		})
		t.Logf("cleared %s after the rule was deleted", time.Since(start).Round(time.Millisecond))
	}

	t.Run("follower-drops-leader", func(t *testing.T) { cut(t, followers[0], leader, followers[1], true) })
	t.Run("worker-drops-control", func(t *testing.T) { cut(t, w1, followers[1], leader, false) })
}
