//go:build e2e

package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// TestOverlayFollowsGossipWhileControlStalls (issue 26 item 3): the only
// control node is stopped with SIGSTOP, so its kernel still accepts
// connections that the process never answers: every fetch of a worker's
// follow loop waits out its budget. Once w1's gossip saw the control node
// fail (which starts such fetches), w2 is killed: w2 must leave w1's
// overlay (static host map) within the gossip failure bound and one
// reload gap: the overlay loop does not wait behind the fetches. Before
// the overlay and follow loops were split, the reconcile pass ran the
// fetches first and the overlay followed only after they timed out.
func TestOverlayFollowsGossipWhileControlStalls(t *testing.T) {
	n := NewNet(t)
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
	bound := n.gossipFailBound(3) + reloadGapBound
	took := Eventually(t, bound, "w1's overlay drops the failed w2 while the control node stalls", func() error {
		if h, err := staticHosts(); err != nil || h != 0 {
			return fmt.Errorf("static hosts %d, %v", h, err)
		}
		return nil
	})
	t.Logf("w2 left w1's overlay %s after it was killed (bound %s), the only control node stopped", took.Round(time.Millisecond), bound)
}

// reloadGapBound is the overlay's reload gap (agent's reloadGap, 250 ms)
// and the time to reload Nebula, with room for a busy core.
const reloadGapBound = time.Second
