package control

import (
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// TestQuorumAfterRemoving: with one of three voters down (its raft shut,
// so its last contact with a leader grows past the bound), removing a
// live voter is refused with QuorumLoss naming the one that is down, and
// nothing changes; removing the dead voter, or a non-voter, is allowed.
func TestQuorumAfterRemoving(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	c3 := c.joinControl(t, origin, "c3")
	ctx := within(t, 20*time.Second)
	if err := origin.p.quorumAfterRemoving(ctx, c2.nodeID); err != nil {
		t.Fatalf("all three voters up: %v", err)
	}
	if err := c3.p.Raft().Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "c3's last contact past the bound", func() bool {
		pr := c3.p.Raft().Progress()
		return pr.LastContact < 0 || pr.LastContact >= maxContact
	})
	err := origin.p.Remove(ctx, "c2", "test")
	if codes.Of(err) != codes.QuorumLoss || !strings.Contains(err.Error(), "c3") {
		t.Fatalf("remove c2 with c3 down: %v, want %s naming c3", err, codes.QuorumLoss)
	}
	if n, _ := origin.p.Raft().FSM().Node(c2.nodeID); n.State != state.NodeActive || !origin.p.Raft().IsVoter(c2.nodeID) {
		t.Fatalf("c2 after the refused removal: %s, voter %t", n.State, origin.p.Raft().IsVoter(c2.nodeID))
	}
	if err := origin.p.quorumAfterRemoving(ctx, c3.nodeID); err != nil {
		t.Fatalf("removing the dead voter: %v", err)
	}
	if err := origin.p.quorumAfterRemoving(ctx, "not-a-voter"); err != nil {
		t.Fatalf("removing a non-voter: %v", err)
	}
}
