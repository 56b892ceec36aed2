package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestJoiningNodeServesOnlyRaftStats: a control node whose FSM holds no
// cluster yet (joining) answers the leader's GET /v1/raft/stats and
// nothing else: every other route a control leaf could call is NotMember.
func TestJoiningNodeServesOnlyRaftStats(t *testing.T) {
	c, origin := newCluster(t)
	fresh := c.start(t, "c9", false) // raft open, nothing replicated: no cluster record
	var stats RaftStats
	if err := origin.p.client.Call(within(t, 5*time.Second), fresh.addr, PathRaftStats, false, nil, &stats); err != nil {
		t.Fatalf("GET %s on a joining node: %v", PathRaftStats, err)
	}
	for _, rt := range Routes() {
		if rt.Method == "GET" && rt.Path == PathRaftStats {
			continue
		}
		var body any
		if rt.Method == "POST" {
			body = struct{}{}
		}
		ctx := within(t, 15*time.Second)
		err := origin.p.client.Call(ctx, fresh.addr, rt.Path, false, body, nil)
		if codes.Of(err) != codes.NotMember {
			t.Errorf("%s %s on a joining node: %v, want %s", rt.Method, rt.Path, err, codes.NotMember)
		}
	}
}
