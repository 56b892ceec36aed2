package control

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestGateJoiningNode: a worker whose certificates are recorded but whose
// join is not confirmed passes the gate on exactly the routes its join
// needs (servedToJoining) and gets NotMember on every other; confirming
// through POST /v1/self/confirm makes it active.
func TestGateJoiningNode(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	nodeID := c.enrollLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	waitState(t, origin, nodeID, state.NodeJoining)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	// This test's own list of the routes a join needs.
	// The CA bundle: a CA rotation may begin while a node joins.
	joinNeeds := map[string]bool{PathNodes: true, PathWatch: true, PathRevocations: true, PathGossipKeys: true, PathCABundle: true,
		PathRaftJoin: true, PathRaftStats: true, PathIndex: true, PathConfirm: true, PathAbortJoin: true, PathLeft: true}
	for _, rt := range Routes() {
		if !containsRole(rt.Roles, pki.RoleWorker) || rt.Path == PathConfirm || rt.Path == PathLeft || rt.Path == PathAbortJoin {
			continue // the writes are called below / would end the join
		}
		var in any
		if rt.Method == http.MethodPost {
			in = map[string]any{}
		}
		err := cl.Call(within(t, 5*time.Second), origin.addr, rt.Path, false, in, nil)
		if joinNeeds[rt.Path] != servedToJoining(rt) {
			t.Errorf("%s %s: servedToJoining %t, this test expects %t", rt.Method, rt.Path, servedToJoining(rt), joinNeeds[rt.Path])
		}
		if joinNeeds[rt.Path] && codes.Of(err) == codes.NotMember {
			t.Errorf("joining w1 refused on %s %s, which a join needs: %v", rt.Method, rt.Path, err)
		}
		if !joinNeeds[rt.Path] && codes.Of(err) != codes.NotMember {
			t.Errorf("joining w1 on %s %s: %v, want %s", rt.Method, rt.Path, err, codes.NotMember)
		}
	}
	if err := cl.ConfirmJoin(within(t, 5*time.Second), []string{origin.addr}, nodeID); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	waitState(t, origin, nodeID, state.NodeActive)
	if err := cl.Call(within(t, 5*time.Second), origin.addr, PathNebulaCert, false, nil, nil); err != nil {
		t.Fatalf("active w1 on %s: %v", PathNebulaCert, err)
	}
}

// TestConfirmControlNeedsVoter: a control node's join is confirmed only
// once raft lists it as a voter; before, the confirmation is refused with
// JoinUnconfirmed (after waiting confirmVoterWait for a lagging view) and
// the node stays joining.
func TestConfirmControlNeedsVoter(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "c9", pki.RoleControl)
	nodeID := c.enrollLeaf(t, origin, "c9", pki.RoleControl, keys, enroll.Ports{Control: 1, Raft: 1, Gossip: 1, Nebula: 1}, id)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	// The refusal comes after confirmVoterWait (a lagging view of raft's
	// configuration is waited out), well within the caller's deadline.
	err = cl.ConfirmJoin(within(t, 10*time.Second), []string{origin.addr}, nodeID)
	if codes.Of(err) != codes.JoinUnconfirmed {
		t.Fatalf("confirm of a control node that is no voter: %v, want %s", err, codes.JoinUnconfirmed)
	}
	if n, _ := origin.p.Raft().FSM().Node(nodeID); n.State != state.NodeJoining {
		t.Fatalf("c9 is %s, want joining", n.State)
	}
}

// TestFailStaleJoins: the leader records a join that has not confirmed
// within JoinBound failed, with its cause, and revokes its certificates;
// its token stays used; a confirmed node is left alone. The failed node
// is refused everywhere (NotMember), like a removed one.
func TestFailStaleJoins(t *testing.T) {
	c, origin := newClusterWith(t, clusterOpts{joinBound: 400 * time.Millisecond})
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	nodeID := c.enrollLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	w2 := c.admit(t, origin, "w2", pki.RoleWorker, nil, enroll.Ports{})
	waitState(t, origin, nodeID, state.NodeFailed)
	n, _ := origin.p.Raft().FSM().Node(nodeID)
	if n.Cause == "" {
		t.Fatal("failed without a cause")
	}
	revoked := 0
	for _, r := range origin.p.Raft().FSM().Revocations() {
		if r.NodeID == nodeID {
			revoked++
		}
	}
	if revoked != 2 {
		t.Fatalf("%d revocations of the failed node, want its TLS and Nebula certificates", revoked)
	}
	for _, tk := range origin.p.Raft().FSM().Tokens() {
		if tk.Name == "w1" && !tk.Consumed() {
			t.Fatal("the failed join's token is unused again")
		}
	}
	if n, _ := origin.p.Raft().FSM().Node(w2); n.State != state.NodeActive {
		t.Fatalf("confirmed w2 is %s", n.State)
	}
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	if err := cl.Call(within(t, 5*time.Second), origin.addr, PathNodes, false, nil, nil); codes.Of(err) != codes.NotMember {
		t.Fatalf("failed w1 on %s: %v, want %s", PathNodes, err, codes.NotMember)
	}
	if err := cl.ConfirmJoin(within(t, 5*time.Second), []string{origin.addr}, nodeID); codes.Of(err) != codes.NotMember {
		t.Fatalf("failed w1 confirms: %v, want %s", err, codes.NotMember)
	}
}

// TestConfirmJoinRetriesNoLeader: a control node that answers NoLeader
// (its read index did not come back in time) does not end the join: the
// confirmation is asked again, of the next seed first, and recorded.
// Another answer (the node is unknown) stays final.
func TestConfirmJoinRetriesNoLeader(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	nodeID := c.enrollLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	waitState(t, origin, nodeID, state.NodeJoining)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)

	// A control node out of touch with its leader: it answers every
	// confirmation NoLeader.
	fakeID, _, _ := c.identity(t, "cut", pki.RoleControl)
	live, err := pki.NewLiveIdentity(fakeID)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := pki.LiveServerTLSConfig(live)
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	answer := atomic.Value{}
	answer.Store(codes.NoLeader)
	cut := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		writeError(w, codes.Wrap(answer.Load().(codes.Code), errors.New("the stand-in's answer")))
	}))
	cut.TLS = serverTLS
	cut.StartTLS()
	t.Cleanup(cut.Close)
	cutAddr := strings.TrimPrefix(cut.URL, "https://")

	// Final answers stay final: a refusal from the first seed is not
	// taken to the next (which would confirm).
	answer.Store(codes.BadRequest)
	err = cl.ConfirmJoin(within(t, 10*time.Second), []string{cutAddr, origin.addr}, nodeID)
	if codes.Of(err) != codes.BadRequest {
		t.Fatalf("confirm with a first seed refusing: %v, want its refusal (%s)", err, codes.BadRequest)
	}
	if n, _ := origin.p.Raft().FSM().Node(nodeID); n.State != state.NodeJoining {
		t.Fatalf("w1 is %s after a refused confirmation", n.State)
	}

	answer.Store(codes.NoLeader)
	before := asked.Load()
	if err := cl.ConfirmJoin(within(t, 10*time.Second), []string{cutAddr, origin.addr}, nodeID); err != nil {
		t.Fatalf("confirm with a first seed answering NoLeader: %v", err)
	}
	if asked.Load() == before {
		t.Fatal("the seed out of touch was never asked")
	}
	waitState(t, origin, nodeID, state.NodeActive)

	// A seed whose disk fails answers SeedUnfit: asked again, of the next
	// seed (a confirmation is repeatable).
	answer.Store(codes.SeedUnfit)
	before = asked.Load()
	if err := cl.ConfirmJoin(within(t, 10*time.Second), []string{cutAddr, origin.addr}, nodeID); err != nil || asked.Load() == before {
		t.Fatalf("confirm with a first seed answering SeedUnfit: %v (asked it: %v)", err, asked.Load() != before)
	}
}
