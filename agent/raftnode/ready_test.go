package raftnode_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/pki/pkitest"
)

// TestLeaderReadyAfterRestart: once LeaderReady answers true on a
// restarted leader, its FSM holds every entry that was on disk before
// (raft re-applies them only after the new term's commit); it answers from
// memory for the rest of the term; a node that does not lead is never
// ready. A leader duty that asked IsLeader alone read the FSM mid-replay
// (e2e.TestPowerLoss in CI, 2026-12-07: a usable token revoked).
func TestLeaderReadyAfterRestart(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	dir := filepath.Join(t.TempDir(), "raft")
	n, addr := open(t, ca, "origin", dir)
	if n.LeaderReady() {
		t.Fatal("a node in no configuration is ready to lead")
	}
	if err := n.Bootstrap(addr); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if err := n.WaitLeader(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("wait leader: %v", err)
	}
	if err := n.Apply(ctx(t, 5*time.Second), bootstrapCmd()); err != nil {
		t.Fatalf("apply: %v", err)
	}
	for range 50 { // refused, but each an entry the FSM applies
		_ = n.Apply(ctx(t, 5*time.Second), bootstrapCmd())
	}
	applied := n.FSM().Index()
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	n2, _ := open(t, ca, "origin", dir)
	if err := n2.WaitLeader(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("wait leader after restart: %v", err)
	}
	if !n2.LeaderReady() {
		t.Fatal("the restarted lone voter leads but is not ready")
	}
	if got := n2.FSM().Index(); got < applied {
		t.Fatalf("ready with the FSM at %d, want >= %d (what was applied before the restart)", got, applied)
	}
	start := time.Now()
	for range 100 {
		if !n2.LeaderReady() {
			t.Fatal("ready once, not ready later in the same term")
		}
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("100 calls in the term took %s: a barrier each, not the memory of the term's", took)
	}
}
