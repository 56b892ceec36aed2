package control

import (
	"context"
	"errors"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestUntilLeaderAnswers: a membership change answered NoLeader is asked
// again until another answer comes (success or any other error, returned
// at once), and gives up with the last NoLeader when ctx ends. The
// promotion and the removal retry through it.
func TestUntilLeaderAnswers(t *testing.T) {
	noLeader := codes.Wrap(codes.NoLeader, errors.New("leadership lost while committing log"))
	calls := 0
	err := untilLeaderAnswers(t.Context(), func() error {
		if calls++; calls < 3 {
			return noLeader
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("after two NoLeader answers: %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	err = untilLeaderAnswers(t.Context(), func() error {
		calls++
		return codes.Wrap(codes.QuorumLoss, errors.New("the last voter"))
	})
	if codes.Of(err) != codes.QuorumLoss || calls != 1 {
		t.Fatalf("another refusal: %v after %d calls, want %s after 1", err, calls, codes.QuorumLoss)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*leaderPoll)
	defer cancel()
	calls = 0
	err = untilLeaderAnswers(ctx, func() error { calls++; return noLeader })
	if codes.Of(err) != codes.NoLeader || calls < 2 || ctx.Err() == nil {
		t.Fatalf("no leader until the deadline: %v after %d calls (ctx %v), want %s after several", err, calls, ctx.Err(), codes.NoLeader)
	}
}
