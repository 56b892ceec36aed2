package control

import (
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestCaughtUp: a non-voter is promoted only when both halves hold — its
// log has every committed entry, and it heard from a leader recently.
// Each row breaks exactly one half, so loosening either is caught.
func TestCaughtUp(t *testing.T) {
	const commit = 100
	for _, tc := range []struct {
		name string
		st   RaftStats
		want bool
	}{
		{"caught up, fresh contact", RaftStats{LastLogIndex: 100, LastContact: 10 * time.Millisecond}, true},
		{"ahead of commit", RaftStats{LastLogIndex: 101, LastContact: 0}, true},
		{"one entry behind", RaftStats{LastLogIndex: 99, LastContact: 10 * time.Millisecond}, false},
		{"empty log", RaftStats{LastLogIndex: 0, LastContact: 10 * time.Millisecond}, false},
		{"never heard from a leader", RaftStats{LastLogIndex: 100, LastContact: -1}, false},
		{"contact exactly maxContact ago", RaftStats{LastLogIndex: 100, LastContact: maxContact}, false},
		{"contact just under maxContact", RaftStats{LastLogIndex: 100, LastContact: maxContact - time.Nanosecond}, true},
		{"stale contact", RaftStats{LastLogIndex: 100, LastContact: 5 * time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.caughtUp(commit); got != tc.want {
				t.Fatalf("caughtUp(%+v, commit %d) = %v, want %v", tc.st, commit, got, tc.want)
			}
		})
	}
}

// TestRaftJoinRefusedThroughFollower: a recorded control node that never
// catches up asks a follower to join raft; the follower passes the request
// to the leader and waits long enough to relay the leader's verdict,
// JoinUnconfirmed. The leader polled the node's progress with backoff, took
// it out of raft again, and logged the refusal with its code (and nothing
// else: removing the non-voter went through).
func TestRaftJoinRefusedThroughFollower(t *testing.T) {
	// Every member waits as long as the leader for a promotion: a follower
	// that waited no longer than that would give up just before the leader
	// answers.
	const promote = 500 * time.Millisecond
	c, origin := newClusterWith(t, clusterOpts{promote: promote})
	c2 := c.joinControl(t, origin, "c2")
	// The ghost's control address answers, but its raft never has.
	progress := c.fakeControl(t, "ghost-api", func(w http.ResponseWriter, _ *http.Request) {
		apitype.WriteJSON(w, http.StatusOK, RaftStats{LastContact: -1})
	})
	_, port, _ := net.SplitHostPort(progress.addr)
	cport, _ := strconv.Atoi(port)
	gid, gkeys, _ := c.identity(t, "ghost", pki.RoleControl)
	id := c.admitLeaf(t, origin, "ghost", pki.RoleControl, gkeys, enroll.Ports{Control: cport, Raft: 1, Gossip: 1, Nebula: 1}, gid)
	ghost, err := NewClient(gid)
	if err != nil {
		t.Fatal(err)
	}
	defer ghost.CloseIdle()
	warnings := len(origin.logs.warnings())

	err = ghost.Call(within(t, 15*time.Second), c2.addr, PathRaftJoin, false, NodeRef{NodeID: id}, nil)
	if codes.Of(err) != codes.JoinUnconfirmed {
		t.Fatalf("a ghost joins through a follower: %v, want %s", err, codes.JoinUnconfirmed)
	}
	if r := origin.p.Raft(); r.IsMember(id) || r.Voters() != 2 || !r.IsLeader() {
		t.Fatalf("after the refusal: member %v, voters %d, leader %v", r.IsMember(id), r.Voters(), r.IsLeader())
	}
	// Backing off from 5 ms to 100 ms, about 9 polls in half a second; without
	// backoff, hundreds.
	if n := progress.count(PathRaftStats); n < 2 || n > 30 {
		t.Fatalf("the leader polled the ghost's progress %d times in %s; want 2..30", n, promote)
	}
	w := origin.logs.warnings()[warnings:]
	if len(w) != 1 || w[0].attrs["code"].String() != string(codes.JoinUnconfirmed) {
		t.Fatalf("the leader logged %d warnings (%v); want one, coded %s", len(w), w, codes.JoinUnconfirmed)
	}
}
