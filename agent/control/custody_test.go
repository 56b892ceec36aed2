package control

import (
	"os"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func hasCADir(m *member) bool {
	_, err := os.Stat(m.p.cfg.CADir)
	return err == nil
}

// TestHandoffFollowsRecord: after a handoff the new holder signs, the old
// one signs nothing (its signer forwards to the holder on record) and has
// released its keys; an admission through a third node is signed by the
// new holder; the same handoff again answers Already.
func TestHandoffFollowsRecord(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	c3 := c.joinControl(t, origin, "c3")

	if _, err := c3.p.Handoff(within(t, 10*time.Second), "c2", "test"); codes.Of(err) != codes.NotCAHolder {
		t.Fatalf("handoff from a non-holder: %v", err)
	}
	if _, err := origin.p.Handoff(within(t, 10*time.Second), "origin", "test"); codes.Of(err) != codes.CustodyTarget {
		t.Fatalf("handoff to itself: %v", err)
	}
	// Keys on a node the record does not name sign nothing: c3's signer
	// forwards to the holder on record.
	c3.p.setCA(c.ca)
	if c3.p.HoldsCA() {
		t.Fatal("c3 holds the CA with keys but no record")
	}
	c.admit(t, c3, "w0", pki.RoleWorker, nil, enroll.Ports{Gossip: 7946, Nebula: 4242})
	if n := c3.logs.count("signed for an admission"); n != 0 {
		t.Fatalf("c3 signed %d certificates with keys the record does not give it", n)
	}
	c3.p.setCA(nil)
	// Keys a handoff from the holder on record left on c3 (its marker
	// names that holder) are kept: the move may still finish.
	if err := pki.SaveCADir(c3.p.cfg.CADir, c.ca, origin.nodeID); err != nil {
		t.Fatal(err)
	}
	if held, err := c3.p.FollowCustody(within(t, 5*time.Second)); err != nil || held || !hasCADir(c3) {
		t.Fatalf("c3 with keys from an unfinished move: held %v, err %v, dir %v", held, err, hasCADir(c3))
	}
	h, err := origin.p.Handoff(within(t, 10*time.Second), "c2", "uid=0@origin")
	if err != nil {
		t.Fatal(err)
	}
	if !h.Released || h.Already || h.To != "c2" {
		t.Fatalf("handoff: %+v", h)
	}
	if origin.p.HoldsCA() || !c2.p.HoldsCA() || c3.p.HoldsCA() {
		t.Fatalf("holds the CA: origin %v c2 %v c3 %v", origin.p.HoldsCA(), c2.p.HoldsCA(), c3.p.HoldsCA())
	}
	// Custody moved elsewhere: c3's leftover copy goes once c2 proves it
	// holds the keys.
	if held, err := c3.p.FollowCustody(within(t, 5*time.Second)); err != nil || held {
		t.Fatalf("c3 follows: held %v, err %v", held, err)
	}
	if hasCADir(origin) || !hasCADir(c2) || hasCADir(c3) {
		t.Fatalf("ca dirs: origin %v c2 %v c3 %v", hasCADir(origin), hasCADir(c2), hasCADir(c3))
	}
	if origin.p.ca.Load() != nil {
		t.Fatal("the old holder still has its keys loaded")
	}
	// The old holder signs nothing itself any more.
	if _, err := origin.p.signAdmittedTLS(within(t, 5*time.Second), enroll.SignRequest{NodeID: "x"}); codes.Of(err) != codes.CAHolderDown {
		t.Fatalf("old holder signing: %v", err)
	}
	// Admissions through the old holder and through c3 are signed by c2.
	ports := enroll.Ports{Gossip: 7946, Nebula: 4242}
	c.admit(t, origin, "w1", pki.RoleWorker, nil, ports)
	c.admit(t, c3, "w2", pki.RoleWorker, nil, ports)
	if n := c2.logs.count("signed for an admission"); n < 4 {
		t.Fatalf("c2 signed %d certificates, want 4 (two admissions)", n)
	}
	again, err := origin.p.Handoff(within(t, 10*time.Second), "c2", "test")
	if err != nil || !again.Already {
		t.Fatalf("re-run: %+v %v", again, err)
	}
	// The old holder can now be removed like any control node.
	if err := c2.p.Remove(within(t, 10*time.Second), "origin", "test"); err != nil {
		t.Fatalf("remove the old holder: %v", err)
	}
}

// TestCustodyForwardRetried: a forwarded SetCAHolder retried under the
// same request id after its first attempt committed (the leader changed
// before it answered) gets the remembered result, not ForwardRefused
// although the record already names the new holder. Found by
// TestHandoffFollowsRecord under load. On raft's own timers: both
// attempts go to the origin as the leader, and under -race on a loaded
// box fastRaft's 100 ms elections moved leadership away ("not the
// leader"), which is not what this test judges.
func TestCustodyForwardRetried(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, timing: &raftDefaults}
	origin := c.bootstrap(t, nil)
	c2 := c.joinControl(t, origin, "c2")
	tr, err := state.Track("req-move", &state.SetCAHolder{From: origin.nodeID, To: c2.nodeID,
		CAFingerprint: c.cluster.CAFingerprint, At: time.Now(), Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := origin.p.client.Call(within(t, 10*time.Second), origin.addr, PathApply, true, ApplyRequest{Tracked: tr}, nil); err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
	}
	if cl, _ := origin.p.Raft().FSM().Cluster(); cl.CAHolder != c2.nodeID {
		t.Fatalf("holder %s", cl.CAHolder)
	}
}
