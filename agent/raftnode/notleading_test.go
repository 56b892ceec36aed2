package raftnode

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/codes"
)

// TestNotLeadingIsNoLeader: a write or membership change refused while
// this node hands leadership off (a stopping control node) is
// codes.NoLeader, which a forwarded write asks the next leader again
// for: BenchmarkControlStop saw one admission fail with raft's "leadership
// transfer in progress" before.
func TestNotLeadingIsNoLeader(t *testing.T) {
	for _, err := range []error{raft.ErrNotLeader, raft.ErrLeadershipLost, raft.ErrLeadershipTransferInProgress,
		fmt.Errorf("apply: %w", raft.ErrLeadershipTransferInProgress)} {
		if got := codes.Of(membershipErr(err)); got != codes.NoLeader {
			t.Errorf("%v: %s, want %s", err, got, codes.NoLeader)
		}
	}
	if got := codes.Of(membershipErr(errors.New("disk on fire"))); got == codes.NoLeader {
		t.Errorf("another error coded %s", got)
	}
}
