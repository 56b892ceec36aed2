package raftnode_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/pki/pkitest"
)

// goldenPrevRaft is a control node's raft dir as the previous release
// (e2e/testdata/previous-release, a3da2fc) wrote it, with that release's
// raftnode: a single voter that applied the cluster's bootstrap and a
// token for w1, took a snapshot at index 4 (snapshots/2-4-*), dropped the
// log entries the snapshot holds (what raft's compaction does once enough
// entries follow), then applied a token for w2 (index 5, in raft.db only).
// Never regenerate it: a new release adds a directory of its own.
const goldenPrevRaft = "testdata/raft-a3da2fc"

// TestPreviousReleaseRaftDir: this build opens the previous release's raft
// dir, restores its snapshot (the cluster and w1 exist nowhere else) and
// replays the log after it (w2).
func TestPreviousReleaseRaftDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	err := filepath.WalkDir(goldenPrevRaft, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(goldenPrevRaft, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := open(t, pkitest.NewCA(t, "alpha"), "origin", dir)
	// Restored from the snapshot before any log entry is applied.
	if got := n.FSM().Index(); got != 4 {
		t.Fatalf("FSM index %d right after Open, want 4: the previous release's snapshot was not restored", got)
	}
	if err := n.WaitCaughtUp(t.Context(), 10*time.Second); err != nil {
		t.Fatalf("wait caught up: %v", err)
	}
	if c, ok := n.FSM().Cluster(); !ok || c.ID != "c1" || c.Name != "alpha" {
		t.Fatalf("cluster from the snapshot: %+v %v", c, ok)
	}
	if o, ok := n.FSM().NodeByName("origin"); !ok || o.ID != "id-origin" {
		t.Fatalf("origin from the snapshot: %+v %v", o, ok)
	}
	var names []string
	for _, tk := range n.FSM().Tokens() {
		names = append(names, tk.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"w1", "w2"}) {
		t.Fatalf("tokens %v, want w1 (from the snapshot) and w2 (from the log after it)", names)
	}
	if got := n.FSM().Index(); got < 5 {
		t.Fatalf("FSM index %d, want at least 5", got)
	}
}
