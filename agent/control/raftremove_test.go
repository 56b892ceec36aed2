package control

import (
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// TestRaftRemoveChecksWhat is issue 27's sixth attack: POST
// /v1/raft/remove {node_id: the CA holder} from another control node
// answered 200, and the CA holder left raft with its record still
// active, no audit event, CAHolderStays bypassed (every later join then
// failed NoLeader). The leader now checks what is asked: the CA holder
// stays; another active control node asked off raft is removed as
// `meshctl remove` removes it (recorded, audited with the caller, its
// certificates revoked), never dropped silently.
func TestRaftRemoveChecksWhat(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	c3 := c.joinControl(t, origin, "c3")
	ctx := within(t, 30*time.Second)

	err := c2.p.client.Call(ctx, origin.addr, PathRaftRemove, true, RaftRemoveRequest{NodeID: origin.nodeID}, nil)
	if codes.Of(err) != codes.CAHolderStays {
		t.Errorf("c2 drops the CA holder from raft: %v, want %s", err, codes.CAHolderStays)
	}
	if !origin.p.Raft().IsVoter(origin.nodeID) {
		t.Fatal("the CA holder is no longer a raft voter")
	}

	before, _ := origin.p.Raft().FSM().Node(c3.nodeID)
	if err := c2.p.client.Call(ctx, origin.addr, PathRaftRemove, true, RaftRemoveRequest{NodeID: c3.nodeID}, nil); err != nil {
		t.Fatalf("c2 asks the leader to drop active c3 from raft: %v", err)
	}
	if origin.p.Raft().IsMember(c3.nodeID) {
		t.Error("c3 still in raft")
	}
	n, _ := origin.p.Raft().FSM().Node(c3.nodeID)
	if n.State != state.NodeRemoved {
		t.Errorf("c3 dropped from raft but recorded %s, want removed", n.State)
	}
	audited := false
	for _, e := range origin.p.Raft().FSM().Audit() {
		if e.Code == codes.EventNodeRemoved && e.Subject == "c3" && e.Actor == "node:c2" {
			audited = true
		}
	}
	if !audited {
		t.Error("no audit event for c3's removal by node:c2")
	}
	rev := origin.p.Revocations()
	if !slices.Contains(rev.Fingerprints, before.TLSFingerprint) {
		t.Error("c3's TLS leaf not revoked")
	}
}
