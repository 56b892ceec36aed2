package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
)

// TestSelfRelay: a worker's POST PathSelfRelay to a control node that is
// not the leader records the worker's own setting, and that node tells
// every member (Hooks.NotifyRevoked) so that workers fetch the node list,
// and their relay lists follow, at once. Without the notification a
// worker saw the offer only at its next reconcile tick, up to 30 s later.
func TestSelfRelay(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	_, w1 := c.worker(t, origin, "w1")
	ctx := within(t, 20*time.Second)
	waitState(t, c2, "id-w1", state.NodeActive)

	for _, on := range []bool{true, false} {
		_, before, _ := c2.hooks.counts()
		if err := w1.Call(ctx, c2.addr, PathSelfRelay, false, RelayRequest{Relay: on}, nil); err != nil {
			t.Fatalf("w1 records relay: %v through c2: %v", on, err)
		}
		waitFor(t, 5*time.Second, "origin applies w1's relay setting", func() bool {
			n, _ := origin.p.Raft().FSM().NodeByName("w1")
			return n.Relay == on
		})
		if _, after, _ := c2.hooks.counts(); after != before+1 {
			t.Fatalf("relay: %v: c2 told gossip %d times, want once", on, after-before)
		}
	}
}
