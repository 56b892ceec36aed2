package control

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// TestFollowerWaitsOutALeaderThatRefuses: a follower whose leader answers
// "not the leader" (mid-election) retries its writes and read indexes,
// backing off rather than hammering the leader, and gives up with
// codes.NoLeader when its deadline passes; a listing answers from local
// state meanwhile.
func TestFollowerWaitsOutALeaderThatRefuses(t *testing.T) {
	var leader *fakeControl
	c, origin := newClusterWith(t, clusterOpts{origin: func(c *testCluster, n *state.Node) {
		// The origin leads, but its record sends followers to a stand-in
		// that refuses every forwarded write and read index.
		leader = c.fakeControl(t, "stand-in", func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, codes.Wrap(codes.NoLeader, errors.New("not the leader")))
		})
		n.EnrollAddr = leader.addr
	}})
	// c2 joins through the origin's real address (its seed), not the record.
	c2 := c.joinControl(t, origin, "c2")

	// The deadline is the caller's: 300 ms. Backing off from 20 ms
	// (writes) or 10 ms (reads), a follower makes about 5 attempts in that
	// time; one that did not back off would make hundreds.
	const window, most = 300 * time.Millisecond, 12
	cmd := &state.SetNodeState{NodeID: c2.nodeID, State: state.NodeActive, At: time.Now(), Actor: "test"}
	if err := c2.p.Write(within(t, window), cmd); codes.Of(err) != codes.NoLeader {
		t.Fatalf("write while the leader refuses: %v, want %s", err, codes.NoLeader)
	}
	if n := leader.count(PathApply); n < 2 || n > most {
		t.Fatalf("the write was sent %d times in %s; want a few retries (2..%d)", n, window, most)
	}
	if err := c2.p.SyncRead(within(t, window)); codes.Of(err) != codes.NoLeader {
		t.Fatalf("read index while the leader refuses: %v, want %s", err, codes.NoLeader)
	}
	if n := leader.count(PathIndex); n < 2 || n > most {
		t.Fatalf("the read index was asked %d times in %s; want a few retries (2..%d)", n, window, most)
	}
	// The revocation list is a strict read: without a leader's read index
	// c2 refuses rather than serve a list that may lack a removal.
	var l Revocations
	if err := origin.p.client.Call(within(t, 5*time.Second), c2.addr, PathRevocations, false, nil, &l); codes.Of(err) != codes.NoLeader {
		t.Fatalf("revocation list without a leader: %v (%d fingerprints), want %s", err, len(l.Fingerprints), codes.NoLeader)
	}
	before := leader.count(PathIndex)
	if rows, err := c2.p.Nodes(within(t, window)); err != nil || len(rows) != 2 {
		t.Fatalf("listing without a leader: %d rows, %v", len(rows), err)
	}
	if n := leader.count(PathIndex) - before; n != 1 {
		t.Fatalf("a listing asked the leader %d times; want once, then local state", n)
	}
}

// TestWriteRefusalIsFinal: an answer from the FSM comes back with its
// code at once, on the leader and through a follower; it is not retried
// as if the leader were missing.
func TestWriteRefusalIsFinal(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	for _, m := range []*member{origin, c2} {
		cmd := &state.SetNodeState{NodeID: "id-nobody", State: state.NodeRemoved, At: time.Now(), Actor: "test"}
		if err := m.p.Write(within(t, 5*time.Second), cmd); codes.Of(err) != codes.NodeUnknown {
			t.Fatalf("%s writes for an unknown node: %v, want %s", m.name, err, codes.NodeUnknown)
		}
	}
}
