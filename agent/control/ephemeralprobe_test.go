package control

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestReapEphemeralNeedsProbe (issue 52 item 8): gossip shows one live
// ephemeral worker failed and another left (what a member forging
// memberlist dead messages and serf leave intents makes it show) for
// twice the window, while both answer the leader's direct probe of their
// overlay address: neither is removed, no certificate is revoked, and
// the leader says why (GossipContradicted). Once one of them stops
// answering too, it is removed as before, a window after its last
// answer; the other stays.
func TestReapEphemeralNeedsProbe(t *testing.T) {
	const window = 400 * time.Millisecond
	clk := &tokClock{now: time.Now()}
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, ephemeral: window,
		nows: map[string]func() time.Time{"origin": clk.Now}}
	origin := c.bootstrap(t, nil)
	var asked atomic.Int32
	answerRevocations(t, c, origin, &asked)
	failed := c.admitWorker(t, origin, "failed", true)
	left := c.admitWorker(t, origin, "left", true)
	setGossip(origin, map[string]string{"origin": "alive", "failed": "alive", "left": "alive"}, nil)
	awaitSweeps(t, origin, 2) // every record seen active and up

	t1 := clk.Now()
	setGossip(origin, map[string]string{"origin": "alive", "failed": "failed", "left": "left"},
		map[string]time.Time{"failed": t1, "left": t1})
	awaitSweeps(t, origin, 2)
	for range 4 { // twice the window, half a window at a time, a sweep or more at each step
		clk.Add(window / 2)
		awaitSweeps(t, origin, 2)
	}
	for _, n := range []state.Node{failed, left} {
		if got, ok := origin.p.Raft().FSM().Node(n.ID); !ok || got.State != state.NodeActive {
			t.Fatalf("%s, answering the leader's probe, is %q (on record: %v) after gossip showed it down for twice the window",
				n.Name, got.State, ok)
		}
	}
	for _, r := range origin.p.Raft().FSM().Revocations() {
		if r.NodeID == failed.ID || r.NodeID == left.ID {
			t.Fatalf("a certificate of a node answering the leader's probe was revoked: %+v", r)
		}
	}
	if origin.p.EphemeralReaped() != 0 {
		t.Fatalf("%d nodes reaped on gossip alone", origin.p.EphemeralReaped())
	}
	origin.hooks.mu.Lock()
	probed := origin.hooks.reached[failed.OverlayIP]
	origin.hooks.mu.Unlock()
	if probed == 0 || len(origin.logs.withCode(codes.GossipContradicted)) == 0 {
		t.Fatalf("%d probes of failed, %d %s records; want the leader to have probed and said so",
			probed, len(origin.logs.withCode(codes.GossipContradicted)), codes.GossipContradicted)
	}

	// left's machine goes down for real: its probe fails too. Its time
	// started again at its last answer, so it goes a window later.
	setSilent(origin, left)
	awaitSweeps(t, origin, 2)
	clk.Add(window + 10*time.Millisecond)
	waitFor(t, 10*time.Second, "left, down and silent past its window, removed and forgotten", func() bool {
		return forgotten(origin, left.ID)
	})
	awaitSweeps(t, origin, 2)
	if got, ok := origin.p.Raft().FSM().Node(failed.ID); !ok || got.State != state.NodeActive {
		t.Fatalf("failed, still answering, is %q (on record: %v)", got.State, ok)
	}
	if origin.p.EphemeralReaped() != 1 {
		t.Fatalf("%d nodes reaped, want left alone", origin.p.EphemeralReaped())
	}
}
