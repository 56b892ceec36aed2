package agenttest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/codes"
)

// TestRaftDirFull: a control node (the only voter) whose raft dir, a small
// tmpfs, is full: an admission fails with a code, no token is issued, the
// node keeps answering reads (status, nodes), and once space is freed the
// same admission succeeds.
func TestRaftDirFull(t *testing.T) {
	p := agenttest.NewProc(t, "origin")
	p.Start(t)
	if r := p.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: %s", r.Stderr)
	}
	p.Stop(t)
	raftDir := filepath.Join(p.Dir, "raft")
	saved := filepath.Join(t.TempDir(), "raft")
	if out, err := exec.Command("cp", "-a", raftDir, saved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	mountTmpfs(t, raftDir, 1<<20)
	if out, err := exec.Command("cp", "-a", saved+"/.", raftDir).CombinedOutput(); err != nil {
		t.Fatalf("cp back: %v %s", err, out)
	}
	p.Start(t)
	agenttest.WaitFor(t, t.Context(), 20*time.Second, func() error {
		if r := p.Ctl(t, "nodes"); r.Exit != 0 {
			return errorf("nodes: %s", r.Stderr)
		}
		return nil
	})
	filler := filepath.Join(raftDir, "filler")
	fill(t, filler, 0)

	start := time.Now()
	r := p.Ctl(t, "admit", "w1")
	t.Logf("admit on a full raft dir after %v: exit %d\n%s%s", time.Since(start), r.Exit, r.Stdout, r.Stderr)
	if r.Exit == 0 {
		t.Fatalf("admit succeeded on a full raft dir:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, string(codes.DiskFull)) || !strings.Contains(r.Stderr, raftDir) {
		t.Errorf("admit on a full raft dir: want %s naming %s:\n%s", codes.DiskFull, raftDir, r.Stderr)
	}
	for _, args := range [][]string{{"status"}, {"nodes"}} {
		if r := p.Ctl(t, args...); r.Exit != 0 {
			t.Errorf("%v on a full raft dir: exit %d\n%s", args, r.Exit, r.Stderr)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitFor(t, t.Context(), 30*time.Second, func() error {
		if r := p.Ctl(t, "admit", "w1"); r.Exit != 0 {
			return errorf("admit after space was freed: %s", r.Stderr)
		}
		return nil
	})
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
