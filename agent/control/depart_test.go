package control

import (
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestLeaveIsADeparture (issue 52 items 1-2): a worker's POST
// /v1/self/left revokes every certificate it held, as a removal does,
// runs the same acknowledgement round (recorded, answered), and the
// record stays nameable: `remove` of the former node revokes again and is
// idempotent. On main a leave revoked nothing and `remove w1` after w1
// left answered NodeUnknown.
func TestLeaveIsADeparture(t *testing.T) {
	c, origin := newCluster(t)
	wid, wkeys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, wkeys, enroll.Ports{}, wid)
	wc, err := NewClient(wid)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.CloseIdle()
	ctx := within(t, 20*time.Second)
	var acks apitype.RemoveResponse
	if err := wc.PostSeeds(ctx, []string{origin.addr}, PathLeft, LeftRequest{NodeID: "id-w1", Actor: "uid=0@w1"}, &acks); err != nil {
		t.Fatalf("left: %v", err)
	}
	if acks.Name != "w1" || acks.Version == 0 {
		t.Fatalf("the leave's answer %+v: want w1's acknowledgement round", acks)
	}
	fsm := origin.p.Raft().FSM()
	w1, _ := fsm.Node("id-w1")
	if w1.State != state.NodeLeft {
		t.Fatalf("w1 is %s", w1.State)
	}
	if left := fsm.Unrevoked(w1); len(left) != 0 {
		t.Fatalf("after its leave w1's certificates %v are still valid", left)
	}
	if _, ok := fsm.RevocationAck("id-w1"); !ok {
		t.Fatal("no acknowledgement round recorded for the leave")
	}
	if _, _, forced := origin.hooks.counts(); !slices.Contains(forced, "w1") {
		t.Fatalf("gossip not told w1 left (force-leave: %v)", forced)
	}
	revoked := len(fsm.Revocations())

	for range 2 {
		if err := origin.p.Remove(ctx, "w1", "uid:0"); err != nil {
			t.Fatalf("remove a node that left: %v", err)
		}
		if n, _ := fsm.Node("id-w1"); n.State != state.NodeRemoved {
			t.Fatalf("w1 is %s after remove", n.State)
		}
		if got := len(fsm.Revocations()); got != revoked {
			t.Fatalf("%d revocations after remove, want %d (nothing more to revoke)", got, revoked)
		}
	}
	if err := origin.p.Remove(ctx, "w9", "uid:0"); codes.Of(err) != codes.NodeUnknown {
		t.Fatalf("remove an unknown name: %v, want %s", err, codes.NodeUnknown)
	}
}

// TestForget (issue 52 item 2): `meshctl forget` drops a former node's
// record now, audited, keeping every revocation; a member is refused
// NodeNotFormer, an unknown name NodeUnknown. A former control node is
// dropped from raft first.
func TestForget(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	_, wkeys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admit(t, origin, "w1", pki.RoleWorker, wkeys, enroll.Ports{})
	ctx := within(t, 30*time.Second)
	if _, err := origin.p.Forget(ctx, "w1", "uid:0"); codes.Of(err) != codes.NodeNotFormer {
		t.Fatalf("forget an active node: %v, want %s", err, codes.NodeNotFormer)
	}
	if _, err := origin.p.Forget(ctx, "w9", "uid:0"); codes.Of(err) != codes.NodeUnknown {
		t.Fatalf("forget an unknown name: %v, want %s", err, codes.NodeUnknown)
	}
	if _, err := origin.p.RemoveAndConfirm(ctx, "w1", "uid:0", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	fsm := origin.p.Raft().FSM()
	w1, _ := fsm.FormerNode("w1")
	revoked := len(fsm.Revocations())
	got, err := origin.p.Forget(ctx, "w1", "uid:0")
	if err != nil || got.Name != "w1" || got.State != "removed" || got.Revocations != 2 {
		t.Fatalf("forget w1: %+v, %v", got, err)
	}
	if _, ok := fsm.Node(w1.ID); ok || fsm.IPAllocated(w1.OverlayIP) || len(fsm.Revocations()) != revoked {
		t.Fatalf("after forget: record kept %v, IP allocated %v, %d revocations (want %d)", ok, fsm.IPAllocated(w1.OverlayIP),
			len(fsm.Revocations()), revoked)
	}
	if a := fsm.Audit(); a[len(a)-1].Code != codes.EventNodeForgotten || a[len(a)-1].Actor != "uid:0" {
		t.Fatalf("audit %+v", a[len(a)-1])
	}
	// A former control node: removed (so out of raft), then forgotten.
	if err := origin.p.Remove(ctx, "c2", "uid:0"); err != nil {
		t.Fatal(err)
	}
	if _, err := origin.p.Forget(ctx, "c2", "uid:0"); err != nil {
		t.Fatalf("forget c2: %v", err)
	}
	if origin.p.Raft().IsMember(c2.nodeID) {
		t.Fatal("c2 forgotten while still in raft")
	}
}
