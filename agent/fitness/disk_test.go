package fitness

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestDiskCheck: the check passes on a directory with room and leaves
// nothing behind; on a full filesystem it fails DiskFull, on one it
// cannot write to DiskCheckFailed, and passes again once there is room.
func TestDiskCheck(t *testing.T) {
	dir := t.TempDir()
	d := NewDisk(dir)
	if err := d.Check(); err != nil || d.Err() != nil {
		t.Fatalf("Check on an empty temp dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, probeName)); !os.IsNotExist(err) {
		t.Fatalf("the probe file stayed: %v", err)
	}

	gone := NewDisk(filepath.Join(dir, "missing"))
	if err := gone.Check(); codes.Of(err) != codes.DiskCheckFailed || gone.Failures() != 1 {
		t.Fatalf("Check of a missing dir: %v (%d failures), want %s", err, gone.Failures(), codes.DiskCheckFailed)
	}

	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	full := filepath.Join(dir, "full")
	if err := os.Mkdir(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", full).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", full).Run() })
	filler := filepath.Join(full, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	_ = f.Close()
	fd := NewDisk(full)
	if err := fd.Check(); codes.Of(err) != codes.DiskFull {
		t.Fatalf("Check on a full tmpfs: %v, want %s", err, codes.DiskFull)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := fd.Check(); err != nil || fd.Err() != nil {
		t.Fatalf("Check once there is room again: %v", err)
	}
}
