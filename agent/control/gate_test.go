package control

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// worker admits a worker called name through via whose own identity is
// the member raft records, and returns a client presenting its leaf.
func (c *testCluster) worker(t *testing.T, via *member, name string) (*pki.Identity, *Client) {
	t.Helper()
	id, keys, _ := c.identity(t, name, pki.RoleWorker)
	c.admitLeaf(t, via, name, pki.RoleWorker, keys, enroll.Ports{}, id)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	return id, cl
}

// callEveryRoute calls every route of the internal API a leaf of role may
// pass the role check of, on addr, and returns each answer's error.
func callEveryRoute(t *testing.T, cl *Client, addr string, role pki.Role) map[string]error {
	t.Helper()
	out := map[string]error{}
	for _, rt := range Routes() {
		if !containsRole(rt.Roles, role) {
			continue
		}
		var in any
		if rt.Method == http.MethodPost {
			in = map[string]any{}
		}
		out[rt.Method+" "+rt.Path] = cl.Call(within(t, 10*time.Second), addr, rt.Path, true, in, nil)
	}
	return out
}

func containsRole(roles []pki.Role, r pki.Role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

// waitState waits until m's FSM records node id in state s.
func waitState(t testing.TB, m *member, id string, s state.NodeState) {
	t.Helper()
	waitFor(t, 5*time.Second, m.name+" records "+id+" as "+string(s), func() bool {
		n, _ := m.p.Raft().FSM().Node(id)
		return n.State == s
	})
}

// TestGateRefusesRemovedNodes: before its removal a control node and a
// worker pass the gate of every control node; after it, every route they
// could call answers codes.NotMember on every control node, leader and
// follower.
func TestGateRefusesRemovedNodes(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	c3 := c.joinControl(t, origin, "c3")
	_, w1 := c.worker(t, origin, "w1")
	ctx := within(t, 20*time.Second)
	for _, m := range []*member{origin, c3} {
		if err := w1.Call(ctx, m.addr, PathNodes, false, nil, nil); err != nil {
			t.Fatalf("w1 reads the nodes on %s before its removal: %v", m.name, err)
		}
		if err := c2.p.client.Call(ctx, m.addr, PathIndex, true, nil, nil); err != nil && codes.Of(err) != codes.NoLeader {
			t.Fatalf("c2 reads the index on %s before its removal: %v", m.name, err)
		}
	}
	for _, name := range []string{"c2", "w1"} {
		if err := origin.p.Remove(ctx, name, "test"); err != nil {
			t.Fatalf("remove %s: %v", name, err)
		}
	}
	for _, m := range []*member{origin, c3} {
		waitState(t, m, "id-w1", state.NodeRemoved)
		waitState(t, m, c2.nodeID, state.NodeRemoved)
		for who, calls := range map[string]map[string]error{
			"c2": callEveryRoute(t, c2.p.client, m.addr, pki.RoleControl),
			"w1": callEveryRoute(t, w1, m.addr, pki.RoleWorker),
		} {
			if len(calls) < 4 {
				t.Fatalf("%s could call only %d routes", who, len(calls))
			}
			for route, err := range calls {
				if codes.Of(err) != codes.NotMember {
					t.Errorf("removed %s calls %s on %s: %v, want %s", who, route, m.name, err, codes.NotMember)
				}
			}
		}
	}
}

// TestGateRefusesAnotherLeaf: a leaf signed by the cluster's CA for a
// member's node id, but with another key (not the leaf raft records), is
// refused; so is a worker leaf on a control-only route (the role check)
// and a leaf of a node never admitted.
func TestGateRefusesAnotherLeaf(t *testing.T) {
	c, origin := newCluster(t)
	c.worker(t, origin, "w1")
	ctx := within(t, 10*time.Second)
	impostor, _, _ := c.identity(t, "w1", pki.RoleWorker) // id-w1, another key
	ic, err := NewClient(impostor)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.CloseIdle()
	for route, err := range callEveryRoute(t, ic, origin.addr, pki.RoleWorker) {
		if codes.Of(err) != codes.NotMember {
			t.Errorf("another leaf for id-w1 calls %s: %v, want %s", route, err, codes.NotMember)
		}
	}
	_, w1 := c.worker(t, origin, "w2")
	if err := w1.Call(ctx, origin.addr, PathApply, true, ApplyRequest{}, nil); codes.Of(err) != codes.PeerRoleDenied {
		t.Errorf("a worker on a control-only route: %v, want %s", err, codes.PeerRoleDenied)
	}
	stranger, _, _ := c.identity(t, "c9", pki.RoleControl)
	sc, err := NewClient(stranger)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.CloseIdle()
	if err := sc.Call(ctx, origin.addr, PathIndex, true, nil, nil); codes.Of(err) != codes.NotMember {
		t.Errorf("a control leaf never admitted: %v, want %s", err, codes.NotMember)
	}
}

// TestLaggingFollowerAdmitsNewNode: a follower that has not applied a new
// node's admission yet does a read index before judging it, and lets it in
// once its FSM has the record, instead of refusing it.
func TestLaggingFollowerAdmitsNewNode(t *testing.T) {
	c, origin := newCluster(t)
	c.joinControl(t, origin, "c2")
	c3 := c.joinControl(t, origin, "c3")
	// Cut c3 off raft (its port refuses every peer, its dials too), so it
	// lags; origin and c2 still commit.
	c3.p.Raft().SetPeerCheck(func(*x509.Certificate) error { return errors.New("cut off for the test") })
	_, w9 := c.worker(t, origin, "w9")
	if _, ok := c3.p.Raft().FSM().Node("id-w9"); ok {
		t.Fatal("c3 applied w9's admission while cut off")
	}
	done := make(chan error, 1)
	go func() { done <- w9.Call(within(t, 10*time.Second), c3.addr, PathNodes, false, nil, nil) }()
	select {
	case err := <-done:
		t.Fatalf("the lagging follower answered before catching up: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	c3.p.Raft().SetPeerCheck(c3.p.raftPeer) // back on raft
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the new node on the lagging follower: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lagging follower never answered")
	}
}

// TestOpenConnectionClosedOnRemoval: a worker's kept-alive connection to a
// follower's port 7300 is closed as soon as the follower applies the
// worker's removal, without another request.
func TestOpenConnectionClosedOnRemoval(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	wid, _ := c.worker(t, origin, "w1")
	conf, err := pki.ClientTLSConfig(wid, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", c2.addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "GET "+PathNodes+" HTTP/1.1\r\nHost: c2\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("w1 on c2 before removal: %s (close %v)", resp.Status, resp.Close)
	}
	if err := origin.p.Remove(within(t, 10*time.Second), "w1", "test"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = br.ReadByte()
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("w1's kept-alive connection to c2 stayed open after its removal (read: %v)", err)
	}
	t.Logf("c2 closed w1's open connection %s after the removal returned", time.Since(start).Round(time.Millisecond))
}

// TestForwardedWritesAuthorised: the leader applies only what a follower
// may forward: a Bootstrap, a Nebula renewal from a node that does not
// hold the CA, a control node marked left by another, a node set active, and
// a removal of the CA holder are refused with nothing applied; the audit
// actor is the forwarding node (and the operator it names), never the
// body's.
//
// With raft's own timers (raftDefaults), not fastRaft's 100 ms: every
// forward goes to the origin as the leader, and under -race on a loaded
// 2-core box fastRaft's elections moved leadership away mid-test ("not
// the leader"), which is not what this test judges.
func TestForwardedWritesAuthorised(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, timing: &raftDefaults}
	origin := c.bootstrap(t, nil)
	c2 := c.joinControl(t, origin, "c2")
	c3 := c.joinControl(t, origin, "c3")
	ctx := within(t, 20*time.Second)
	now := time.Now()
	forward := func(id string, cmd state.Command, operator string) error {
		tr, err := state.Track(id, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return c2.p.client.Call(ctx, origin.addr, PathApply, true, ApplyRequest{Tracked: tr, Operator: operator}, nil)
	}
	fsm := origin.p.Raft().FSM()
	for _, tc := range []struct {
		name string
		cmd  state.Command
		want codes.Code
	}{
		{"bootstrap", state.Bootstrap{Cluster: c.cluster, Origin: state.Node{ID: "id-x", Name: "x"}, At: now}, codes.ForwardRefused},
		{"renew nebula, not the CA holder", state.RenewNebula{NodeID: c3.nodeID, Cert: []byte("x"), Fingerprint: "f",
			Issued: now, Expires: now.Add(time.Hour), At: now}, codes.ForwardRefused},
		{"left for another node", state.SetNodeState{NodeID: c3.nodeID, State: state.NodeLeft, At: now}, codes.ForwardRefused},
		{"left for itself while still a raft voter", state.SetNodeState{NodeID: c2.nodeID, State: state.NodeLeft, At: now}, codes.ForwardRefused},
		{"active for itself", state.SetNodeState{NodeID: c2.nodeID, State: state.NodeActive, At: now}, codes.ForwardRefused},
		{"remove itself", state.SetNodeState{NodeID: c2.nodeID, State: state.NodeRemoved, At: now}, codes.ForwardRefused},
		{"remove the CA holder", state.SetNodeState{NodeID: origin.nodeID, State: state.NodeRemoved, At: now}, codes.CAHolderStays},
		// Custody: only away from the caller, or to it by a restore; the
		// FSM's compare-and-set decides whether the caller holds the CA.
		{"custody moved from another node", state.SetCAHolder{From: origin.nodeID, To: c2.nodeID,
			CAFingerprint: c.cluster.CAFingerprint, At: now}, codes.ForwardRefused},
		{"custody restored onto another node", state.SetCAHolder{From: origin.nodeID, To: c3.nodeID,
			CAFingerprint: c.cluster.CAFingerprint, Restore: true, At: now}, codes.ForwardRefused},
		{"custody moved from itself, not the holder", state.SetCAHolder{From: c2.nodeID, To: c3.nodeID,
			CAFingerprint: c.cluster.CAFingerprint, At: now}, codes.CAHolderChanged},
		{"another node's CA backup", state.RecordCABackup{NodeID: origin.nodeID, At: now}, codes.ForwardRefused},
		{"its own CA backup, not the holder", state.RecordCABackup{NodeID: c2.nodeID, At: now}, codes.NotCAHolder},
		// Issue 52: a join is undone only while raft's configuration does
		// not list the node (the FSM judges the rest).
		{"undo the join of a raft member", state.AbortJoin{NodeID: c3.nodeID, Leaf: "f", At: now}, codes.ForwardRefused},
	} {
		nodes, revs := fsm.Nodes(), len(fsm.Revocations())
		if err := forward("req-"+tc.name, tc.cmd, ""); codes.Of(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
		if after := fsm.Nodes(); len(after) != len(nodes) || len(fsm.Revocations()) != revs {
			t.Errorf("%s changed the records", tc.name)
		}
		for _, n := range fsm.Nodes() {
			if n.State != state.NodeActive {
				t.Errorf("%s: %s is %s", tc.name, n.Name, n.State)
			}
		}
	}

	// The leader judges the actor the forwarder claims against the
	// forwarder's TLS identity (c2); the Actor inside the forwarded body
	// (here the origin's operator) is never read.
	for i, tc := range []struct{ claim, want string }{
		{"uid=1000@c2", "uid=1000@c2"},
		{"node:c2", "node:c2"},
		{"", "node:c2"},
		{"uid=0@origin", "node:c2"},       // another node's operator
		{"uid=0@c3", "node:c2"},           // another node's operator
		{"node:origin", "node:c2"},        // another node
		{"uid=0@w1 via c2", "node:c2"},    // a relay, but a mint is not relayed
		{"local:uid=0,pid=42", "node:c2"}, // the old form is no actor
		{"uid=0@c2\nnode:c3", "node:c2"},
	} {
		rec := enroll.TokenRecord{Hash: enroll.TokenHash{byte(i + 1)}, Name: "w" + string(rune('a'+i)), Role: pki.RoleWorker,
			Created: now, Expires: now.Add(10 * time.Minute), MintedBy: origin.nodeID}
		if err := forward(fmt.Sprintf("req-mint-%d", i), state.MintToken{Record: rec, Actor: "uid=0@origin"}, tc.claim); err != nil {
			t.Fatalf("forward a mint: %v", err)
		}
		a := fsm.Audit()
		if last := a[len(a)-1]; last.Code != codes.EventTokenMinted || last.Actor != tc.want {
			t.Errorf("claim %q: audit %s by %q, want by %q", tc.claim, last.Code, last.Actor, tc.want)
		}
	}

	// A worker's leave relayed by a control node, a forwarded removal of
	// another node and a node's own leave pass.
	c.worker(t, origin, "w1")
	c.worker(t, origin, "w2")
	if err := forward("req-left-w2", state.SetNodeState{NodeID: "id-w2", State: state.NodeLeft, At: now}, "uid=0@w2 via c2"); err != nil {
		t.Fatalf("relay a worker's leave: %v", err)
	}
	// A relay may name the worker whose leave it is, and only that one.
	if a := fsm.Audit(); a[len(a)-1].Code != codes.EventNodeLeft || a[len(a)-1].Actor != "uid=0@w2 via c2" {
		t.Errorf("relayed leave of w2 recorded as %+v, want by uid=0@w2 via c2", a[len(a)-1])
	}
	if err := forward("req-remove-w1", state.SetNodeState{NodeID: "id-w1", State: state.NodeRemoved, At: now}, "uid=0@w1 via c2"); err != nil {
		t.Fatalf("forward a removal: %v", err)
	}
	if a := fsm.Audit(); a[len(a)-1].Code != codes.EventNodeRemoved || a[len(a)-1].Actor != "node:c2" {
		t.Errorf("a removal claiming the removed worker's operator recorded as %+v, want by node:c2", a[len(a)-1])
	}
	if err := c3.p.LeaveRaft(ctx); err != nil {
		t.Fatal(err)
	}
	tr, _ := state.Track("req-left", state.SetNodeState{NodeID: c3.nodeID, State: state.NodeLeft, At: now})
	if err := c3.p.client.Call(ctx, origin.addr, PathApply, true, ApplyRequest{Tracked: tr}, nil); err != nil {
		t.Fatalf("c3 records itself left: %v", err)
	}
}

// TestRemovalPokesEveryControlNode: a control node that had no part in a
// removal pokes its overlay reconcile as soon as its raft applies it (so
// its Nebula blocklist follows at once, not at the next tick).
func TestRemovalPokesEveryControlNode(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	c.worker(t, origin, "w1")
	waitState(t, c2, "id-w1", state.NodeActive)
	before, _, _ := c2.hooks.counts()
	if err := origin.p.Remove(within(t, 10*time.Second), "w1", "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "c2 pokes its reconcile after applying the removal", func() bool {
		pokes, _, _ := c2.hooks.counts()
		n, _ := c2.p.Raft().FSM().Node("id-w1")
		return n.State == state.NodeRemoved && pokes > before
	})
}
