package agenttest_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
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

// TestJoinOnFullDisk: a joiner whose state dir (a small tmpfs) is full.
// With no room at all, the join fails before anything is sent, with
// DiskFull naming the pending keys' file, and the token stays usable. With
// room for the pending keys but not the identity, the join is recorded by
// the cluster but fails here with DiskFull naming the identity's path and
// takes back what it wrote (no identity, no node.json, no temp files).
// Once space is freed the same command succeeds, resuming the join.
func TestJoinOnFullDisk(t *testing.T) {
	origin := agenttest.NewProc(t, "origin")
	origin.Start(t)
	w1 := agenttest.NewProc(t, "w1")
	mountTmpfs(t, w1.Dir, 256<<10)
	w1.Start(t)
	if r := origin.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: %s", r.Stderr)
	}
	r := origin.Ctl(t, "admit", "w1")
	if r.Exit != 0 {
		t.Fatalf("admit: %s", r.Stderr)
	}
	tok := strings.TrimSpace(r.Stdout[strings.LastIndex(strings.TrimSpace(r.Stdout), "\n")+1:])
	filler := filepath.Join(w1.Dir, "filler")

	wantLeftovers := func(t *testing.T, allowed ...string) {
		t.Helper()
		ents, err := os.ReadDir(w1.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			ok := e.Name() == "filler" || e.Name() == "meshd.pid"
			for _, a := range allowed {
				ok = ok || e.Name() == a
			}
			if !ok {
				t.Errorf("the failed join left %s in the state dir", e.Name())
			}
		}
	}

	t.Run("no-room", func(t *testing.T) {
		fill(t, filler, 0)
		r := w1.Ctl(t, "join", tok)
		if r.Exit == 0 || !strings.Contains(r.Stderr, string(codes.DiskFull)) ||
			!strings.Contains(r.Stderr, filepath.Join(w1.Dir, "pending-join.json")) {
			t.Fatalf("join on a full disk: exit %d, want %s naming pending-join.json:\n%s%s", r.Exit, codes.DiskFull, r.Stdout, r.Stderr)
		}
		wantLeftovers(t)
	})
	t.Run("room-for-keys-only", func(t *testing.T) {
		fill(t, filler, 2)
		r := w1.Ctl(t, "join", tok)
		if r.Exit == 0 || !strings.Contains(r.Stderr, string(codes.DiskFull)) ||
			!strings.Contains(r.Stderr, filepath.Join(w1.Dir, "identity")) {
			t.Logf("%s", r.Stderr)
			t.Fatalf("join with room for its keys only: exit %d, want %s naming the identity:\n%s%s", r.Exit, codes.DiskFull, r.Stdout, r.Stderr)
		}
		// The pending keys stay: they are what lets the same join resume.
		wantLeftovers(t, "pending-join.json")
		if r := w1.Ctl(t, "status"); r.Exit != 0 || !strings.Contains(r.Stdout, "has not joined") {
			t.Fatalf("status after the failed join: %s%s", r.Stdout, r.Stderr)
		}
	})
	t.Run("space-freed", func(t *testing.T) {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		r := w1.Ctl(t, "join", tok)
		if r.Exit != 0 {
			t.Fatalf("the same join after space was freed: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
		}
		t.Logf("join:\n%s", r.Stdout)
		if r := origin.Ctl(t, "nodes"); !strings.Contains(r.Stdout, "w1") {
			t.Fatalf("nodes does not list w1:\n%s", r.Stdout)
		}
	})
}
