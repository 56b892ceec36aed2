//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// TestOverlayFollowsGossipWhileControlStalls (issue 26 item 3): the only
// control node is stopped with SIGSTOP, so its kernel still accepts
// connections that the process never answers: every fetch of a worker's
// follow loop waits out its budget. Once w1's gossip saw the control node
// fail (which starts such fetches), w2 is killed: w1's gossip sees it
// failed within the gossip failure bound, and w2 stays in w1's overlay
// (only raft withdraws a peer, issue 27). Then a firewall reload on w1 is
// applied by the overlay loop within one reload gap: the overlay loop does
// not wait behind the fetches. Before the overlay and follow loops were
// split, the reconcile pass ran the fetches first and the overlay followed
// only after they timed out.
func TestOverlayFollowsGossipWhileControlStalls(t *testing.T) {
	n := NewNet(t)
	n.ExtraConfig = "gossip_pool: true\n" // the workers in the pool whose events this tests (out of it by default)
	nodes := cluster(t, n, "w1", "w2")
	origin, w1, w2 := nodes[0], nodes[1], nodes[2]
	allPairsPing(t, nodes, 10*time.Second)
	status := func() (apitype.Status, error) {
		var st apitype.Status
		if err := w1.CtlJSON(t.Context(), &st, "status"); err != nil {
			return st, err
		}
		if st.Overlay == nil || st.Gossip == nil {
			return st, fmt.Errorf("no overlay or gossip in w1's status")
		}
		return st, nil
	}
	staticHosts := func() (int, error) {
		st, err := status()
		if err != nil {
			return 0, err
		}
		return st.Overlay.StaticHosts, nil
	}
	Eventually(t, 10*time.Second, "w1's overlay holds w2", func() error {
		if h, err := staticHosts(); err != nil || h != 1 {
			return fmt.Errorf("static hosts %d, %v", h, err)
		}
		return nil
	})

	if err := origin.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = origin.cmd.Process.Signal(syscall.SIGCONT) })
	// Gossip sees the stopped control node fail: that event starts a
	// follow pass on w1 whose fetches are due by now (more than a second
	// since the last) and wait on the stopped control node.
	Eventually(t, n.gossipFailBound(3), "w1's gossip sees the stopped control node fail", func() error {
		st, err := status()
		if err != nil || st.Gossip.Alive != 2 {
			return fmt.Errorf("alive %+v, %v", st.Gossip, err)
		}
		return nil
	})
	w2.Kill()
	seen := Eventually(t, n.gossipFailBound(3), "w1's gossip sees w2 fail while the control node stalls", func() error {
		st, err := status()
		if err != nil || st.Gossip.Alive != 1 {
			return fmt.Errorf("alive %+v, %v", st.Gossip, err)
		}
		return nil
	})
	if h, err := staticHosts(); err != nil || h != 1 {
		t.Fatalf("w1's overlay after w2 failed in gossip: static hosts %d, %v; want w2 kept (only raft withdraws)", h, err)
	}
	base, err := os.ReadFile(w1.Config)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, errs, code := setFirewall(t, w1, string(base), "firewall:\n  inbound:\n    - {port: any, proto: any, group: control}\n")
	took := time.Since(start)
	if code != 0 || strings.Contains(errs, "X") || took > reloadGapBound+2*time.Second {
		t.Fatalf("w1's firewall reload with its only control node stopped: exit %d after %s\n%s%s", code, took, out, errs)
	}
	t.Logf("w2 failed in w1's gossip %s after it was killed; a firewall reload applied in %s, the only control node stopped",
		seen.Round(time.Millisecond), took.Round(time.Millisecond))
}

// reloadGapBound is the overlay's reload gap (agent/member's nextGap: 250
// ms at this test's few nodes) and the time to reload Nebula, with room
// for a busy core.
const reloadGapBound = time.Second
