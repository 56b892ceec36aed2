package agenttest

import (
	"context"
	"testing"
	"time"
)

// WaitFor polls cond with backoff until it returns nil or the deadline
// (ctx's, at most d) passes; then it fails the test with cond's last error.
// Use it only for state that has no event to wait on.
func WaitFor(t testing.TB, ctx context.Context, d time.Duration, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	backoff := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("condition not met within %s: %v", d, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}
