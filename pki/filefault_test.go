package pki_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// failNth returns fault functions whose n-th call (counting fsyncs and
// renames separately, from 1) fails with EIO; the others do the real thing.
func failNth(stage string, n int) (func(*os.File) error, func(string, string) error) {
	syncs, renames := 0, 0
	sync := func(f *os.File) error {
		syncs++
		if stage == "fsync" && syncs == n {
			return syscall.EIO
		}
		return f.Sync()
	}
	rename := func(o, p string) error {
		renames++
		if stage == "rename" && renames == n {
			return syscall.EIO
		}
		return os.Rename(o, p)
	}
	return sync, rename
}

// tempFiles lists WriteFileAtomic's temporary files left under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			left = append(left, path)
		}
		return nil
	})
	return left
}

// TestWriteFileAtomicFaults: an fsync or rename failure is returned, the
// old file is left as it was and no temporary file stays.
func TestWriteFileAtomicFaults(t *testing.T) {
	for _, stage := range []string{"fsync", "rename"} {
		t.Run(stage, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "node.json")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			defer pki.SetFileFaults(failNth(stage, 1))()
			err := pki.WriteFileAtomic(path, []byte("new"), 0o600)
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("WriteFileAtomic with a failing %s = %v, want EIO", stage, err)
			}
			if b, _ := os.ReadFile(path); string(b) != "old" {
				t.Fatalf("the file holds %q after a failed %s, want the old content", b, stage)
			}
			if left := tempFiles(t, dir); len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}

// TestIdentitySaveFaults: whichever fsync or rename of an identity save
// fails (init and join save one), the save fails, no identity is seen
// (the marker is written last) and no temporary file stays.
func TestIdentitySaveFaults(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	const files = 7 // six files and the marker
	for _, stage := range []string{"fsync", "rename"} {
		for n := 1; n <= files; n++ {
			t.Run(stage+"/"+string(rune('0'+n)), func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "identity")
				restore := pki.SetFileFaults(failNth(stage, n))
				err := id.Save(dir)
				restore()
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("Save with %s %d failing = %v, want EIO", stage, n, err)
				}
				if pki.HasIdentity(dir) {
					t.Fatal("an identity is seen after a failed save")
				}
				if _, err := pki.LoadIdentity(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("LoadIdentity after a failed save = %v, want fs.ErrNotExist", err)
				}
				if left := tempFiles(t, dir); len(left) != 0 {
					t.Fatalf("temporary files left: %v", left)
				}
			})
		}
	}
}
