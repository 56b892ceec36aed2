package agenttest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// mountTmpfs mounts a tmpfs of size bytes at dir (mode 0700), unmounted
// lazily when the test ends (meshd may still hold its lock file open).
func mountTmpfs(t *testing.T, dir string, size int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(size)+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

// fill writes path until the filesystem is full, then gives back free
// pages of 4 KiB (tmpfs counts whole pages).
func fill(t *testing.T, path string, free int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	n := 0
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
		n++
	}
	if err := f.Truncate(int64(max(0, n-free) * 4096)); err != nil {
		t.Fatal(err)
	}
}

// TestJoinOnFullDisk: a joiner whose state dir (a small tmpfs) has less
// room than a join needs is refused by the join's own state-dir check (the
// one `join --plan` makes, issue 52) before anything is written or sent:
// StateDir, the token unused. A disk that fills after that check (here
// while the join waits for an operator's approval, its keys written) fails
// the identity's write with DiskFull naming its path; the cluster undoes
// the admission (JoinUndone), the joiner takes back everything it wrote,
// and the token stays usable: once space is freed it joins.
func TestJoinOnFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs")
	}
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	origin.Init(t, "alpha")
	dir := filepath.Join(t.TempDir(), "w1")
	mountTmpfs(t, dir, 20<<20) // a worker's join needs 16 MiB free
	w1 := agenttest.NewNodeAt(t, "w1", agenttest.TakeIP(t), clock, func(c *config.File) { c.StateDir = dir })
	tok := origin.Admit(t, apitype.AdmitRequest{Name: "w1", Approve: true})
	filler := filepath.Join(dir, "filler")

	wantLeftovers := func(t *testing.T) {
		t.Helper()
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "filler" && e.Name() != "meshd.pid" {
				t.Errorf("the failed join left %s in the state dir", e.Name())
			}
		}
	}

	t.Run("below-the-minimum", func(t *testing.T) {
		fill(t, filler, 2)
		// Refused before it is sent, so before it could wait for approval.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err := w1.Client.Join(ctx, apitype.JoinRequest{Token: tok}, func(l apitype.JoinLine) { t.Logf("w1 join: %s", l.Step) })
		if codes.Of(err) != codes.StateDir || !strings.Contains(err.Error(), "MiB free") {
			t.Fatalf("join on a nearly full disk: %v, want %s saying how much is free", err, codes.StateDir)
		}
		wantLeftovers(t)
		if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
			t.Fatalf("token %s after a join its state-dir check refused", st)
		}
	})
	t.Run("fills-after-the-check", func(t *testing.T) {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		shown, done := approvalJoin(t, w1, tok)
		a := waitShown(t, shown, done) // checks passed, keys written
		fill(t, filler, 0)
		if _, err := origin.Client.Approve(t.Context(), apitype.ApproveRequest{Name: "w1", Code: a.Code}); err != nil {
			t.Fatal(err)
		}
		err := waitDone(t, done)
		if codes.Of(err) != codes.JoinUndone || !strings.Contains(err.Error(), string(codes.DiskFull)) ||
			!strings.Contains(err.Error(), filepath.Join(dir, "identity")) {
			t.Fatalf("join whose disk filled after its check: %v, want %s with %s naming the identity", err, codes.JoinUndone, codes.DiskFull)
		}
		wantLeftovers(t)
		if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
			t.Fatalf("token %s after the undone join", st)
		}
		if st, _ := w1.Client.Status(t.Context()); st.State != "unjoined" {
			t.Fatalf("w1 is %q after the undone join", st.State)
		}
	})
	t.Run("space-freed", func(t *testing.T) {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		shown, done := approvalJoin(t, w1, tok)
		a := waitShown(t, shown, done)
		if _, err := origin.Client.Approve(t.Context(), apitype.ApproveRequest{Name: "w1", Code: a.Code}); err != nil {
			t.Fatal(err)
		}
		if err := waitDone(t, done); err != nil {
			t.Fatalf("the same token after space was freed: %v", err)
		}
		if r := nodeRow(t, origin, "w1"); r.State != "active" {
			t.Fatalf("w1 is %s", r.State)
		}
	})
}
