//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestWorkerWatchCatchesUp (issue 32): a worker cut off from every
// control node's port 7300 (an nftables rule in its namespace answering
// each of its TCP packets to that port with a reset: its stream breaks at
// the next line and each new one is refused) misses a join. With the rule
// gone it opens a stream from the index it holds and gets only what
// changed: `meshctl status` shows no whole table other than its join's, a later stream, more changes, its index at least the
// control node's after the join; and it pings the new node by name, which
// it finds in its own copy of the records.
func TestWorkerWatchCatchesUp(t *testing.T) {
	n := NewNet(t)
	nodes := cluster(t, n, "w1")
	origin, w1 := nodes[0], nodes[1]
	Eventually(t, 15*time.Second, "w1's stream open", func() error {
		st := w1.status(t)
		if st.Watch == nil || st.Watch.From == "" || st.Watch.Full < 1 {
			return fmt.Errorf("w1 watch %+v", st.Watch)
		}
		return nil
	})
	st0 := w1.status(t).Watch

	n.in(w1.Name, "nft", "add", "table", "inet", "watchcut")
	n.in(w1.Name, "nft", "add", "chain", "inet", "watchcut", "out", "{ type filter hook output priority 0; }")
	n.in(w1.Name, "nft", "add", "rule", "inet", "watchcut", "out", "tcp", "dport", "7300", "reject", "with", "tcp", "reset")
	w2 := n.NewNode("w2")
	w2.Start(t)
	w2.MustCtl(t, "join", origin.Admit(t, "w2"))
	joinedAt := origin.status(t).RaftApplied
	Eventually(t, 20*time.Second, "w1's stream broken", func() error {
		if st := w1.status(t).Watch; st.From != "" || st.Index >= joinedAt {
			return fmt.Errorf("w1 watch %+v (the join is at index %d)", st, joinedAt)
		}
		return nil
	})
	n.in(w1.Name, "nft", "delete", "table", "inet", "watchcut")

	took := Eventually(t, 20*time.Second, "w1 caught up from its index", func() error {
		st := w1.status(t).Watch
		if st.Index < joinedAt || st.From == "" {
			return fmt.Errorf("w1 watch %+v, want index ≥ %d", st, joinedAt)
		}
		return nil
	})
	st1 := w1.status(t).Watch
	// Its join may have brought two whole tables (a strict ask from index
	// 0 beside the stream's first line); the catch-up brings none.
	if st1.Full != st0.Full || st1.Streams <= st0.Streams || st1.Deltas <= st0.Deltas {
		t.Fatalf("w1 watch before the cut %+v, after %+v: want no other whole table than its join's, a later stream, more changes", st0, st1)
	}
	w1.MustCtl(t, "ping", "w2")
	t.Logf("w1 caught up %s after the rule went (watch before %+v, after %+v)", took.Round(time.Millisecond), *st0, *st1)
}
