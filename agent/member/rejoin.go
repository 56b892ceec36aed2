package member

import (
	"context"
	"errors"
	"fmt"
)

// confirmJoined tells the cluster that this node's join is confirmed
// (DESIGN §6 step 10 passed): its record goes from joining to active.
func (rt *Runtime) ConfirmJoined(ctx context.Context, step func(string, ...any)) error {
	if err := rt.client.ConfirmJoin(ctx, rt.seeds(), rt.facts.NodeID); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no control node recorded the confirmation in time: %w", err)
		}
		return err
	}
	// A control node answers from its own FSM (seeds of the tokens it
	// mints, its node list): return once that has the confirmation.
	if err := rt.cluster.Settle(ctx); err != nil {
		return fmt.Errorf("confirmed, but this node's raft has not applied it yet: %w", err)
	}
	step("confirmed: the cluster records %s active", rt.facts.Name)
	return nil
}
