package control

import (
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// revokedHere reports whether m's FSM revokes fingerprint fp.
func revokedHere(m *member, fp string) bool {
	return slices.ContainsFunc(m.p.Raft().FSM().Revocations(), func(r state.Revocation) bool { return r.Fingerprint == fp })
}

// tokenFor is the record of the token m's FSM holds for name.
func tokenFor(t *testing.T, m *member, name string) enroll.TokenRecord {
	t.Helper()
	for _, r := range m.p.Raft().FSM().Tokens() {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no token for %s", name)
	return enroll.TokenRecord{}
}

// TestAbortJoin: a worker whose join failed on its machine after it was
// certified undoes it with its own new leaf, here through a follower (the
// write is forwarded to the leader): both certificates signed for it are
// revoked, its record is gone, its token is unused again, and the leaf
// now opens no door. It undoes only itself: another joining worker stays
// as it was. An active member's undo is refused (JoinConfirmed), and so
// is a control joiner that got into raft's configuration (BadRequest).
func TestAbortJoin(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")

	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	w1 := c.enrollLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	waitState(t, c2, w1, state.NodeJoining)
	rec, _ := origin.p.Raft().FSM().Node(w1)
	id2, keys2, _ := c.identity(t, "w2", pki.RoleWorker)
	w2 := c.enrollLeaf(t, origin, "w2", pki.RoleWorker, keys2, enroll.Ports{}, id2)
	idA, keysA, _ := c.identity(t, "wa", pki.RoleWorker)
	c.admitLeaf(t, origin, "wa", pki.RoleWorker, keysA, enroll.Ports{}, idA)

	client := func(id *pki.Identity) *Client {
		cl, err := NewClient(id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.CloseIdle)
		return cl
	}

	if err := client(idA).AbortJoin(within(t, 5*time.Second), []string{c2.addr}, "not joining"); codes.Of(err) != codes.JoinConfirmed {
		t.Fatalf("an active member undoes its join: %v, want %s", err, codes.JoinConfirmed)
	}
	cl := client(id)
	if err := cl.AbortJoin(within(t, 10*time.Second), []string{c2.addr}, "start overlay: ports.nebula"); err != nil {
		t.Fatalf("the joiner undoes its join: %v", err)
	}
	waitFor(t, 5*time.Second, "w1's record gone on the leader", func() bool {
		_, ok := origin.p.Raft().FSM().Node(w1)
		return !ok
	})
	for _, fp := range []string{rec.TLSFingerprint, rec.NebulaFingerprint} {
		if fp == "" || !revokedHere(origin, fp) {
			t.Fatalf("certificate %q of the undone join is not revoked: %v", fp, origin.p.Raft().FSM().Revocations())
		}
	}
	if tok := tokenFor(t, origin, "w1"); tok.Consumed() {
		t.Fatalf("w1's token after the undo: %+v, want unused", tok)
	}
	if err := cl.AbortJoin(within(t, 5*time.Second), []string{origin.addr}, "again"); codes.Of(err) != codes.NotMember {
		t.Fatalf("the undone leaf again: %v, want %s", err, codes.NotMember)
	}
	if n, ok := origin.p.Raft().FSM().Node(w2); !ok || n.State != state.NodeJoining {
		t.Fatalf("w2 after w1's undo: %+v %t, want joining", n, ok)
	}
	if audit := origin.p.Raft().FSM().Audit(); audit[len(audit)-1].Code != codes.EventJoinAborted {
		t.Fatalf("last audit event %+v", audit[len(audit)-1])
	}

	// A control joiner in raft's configuration is refused: the join bound
	// fails it and takes it out of raft.
	m := c.start(t, "c3", false)
	_, cport, _ := net.SplitHostPort(m.addr)
	_, rport, _ := net.SplitHostPort(m.raftAddr)
	cp, _ := strconv.Atoi(cport)
	rp, _ := strconv.Atoi(rport)
	cid := *m.id
	c3 := c.enrollLeaf(t, origin, "c3", pki.RoleControl, m.keys, enroll.Ports{Control: cp, Raft: rp, Gossip: 7946, Nebula: 4242}, &cid)
	if err := m.live.Swap(&cid); err != nil {
		t.Fatal(err)
	}
	if err := m.p.JoinRaft(within(t, 15*time.Second), []string{origin.addr}, func(string, ...any) {}); err != nil {
		t.Fatalf("c3 joins raft: %v", err)
	}
	if err := m.p.client.AbortJoin(within(t, 5*time.Second), []string{origin.addr}, "late"); codes.Of(err) != codes.BadRequest {
		t.Fatalf("a control joiner in raft undoes its join: %v, want %s", err, codes.BadRequest)
	}
	if n, _ := origin.p.Raft().FSM().Node(c3); n.State != state.NodeJoining {
		t.Fatalf("c3 is %s after a refused undo, want joining", n.State)
	}
}
