package nebulabundle

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestWriteDir: a new directory is 0700, host.key 0600 whatever the
// umask, the rest 0644, each file holds what the bundle gave, and no
// temp file is left.
func TestWriteDir(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	in := issue(t, true)
	b := stockBundle(in, true)
	dir := filepath.Join(t.TempDir(), "new", "bundle")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	cfg, err := b.ConfigYAML()
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %v, want 0700", m)
	}
	for name, want := range map[string]struct {
		data []byte
		mode fs.FileMode
	}{
		CAFile: {in.ca, 0o644}, CertFile: {in.cert, 0o644}, KeyFile: {in.key, 0o600}, ConfigFile: {cfg, 0o644},
	} {
		p := filepath.Join(dir, name)
		if m := mode(t, p); m != want.mode {
			t.Errorf("%s mode %v, want %v", name, m, want.mode)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want.data) {
			t.Errorf("%s: content differs (err %v)", name, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Errorf("dir holds %d entries, want 4 (a temp file left?)", len(entries))
	}
}

// TestWriteDirKeepsKey: writing the same bundle again (a renewal) works
// and fixes host.key's mode; a bundle with a different key is refused
// with ErrKeyExists, naming no key, and changes no file; a bundle
// without a key leaves the existing one; an invalid bundle creates
// nothing.
func TestWriteDirKeepsKey(t *testing.T) {
	in := issue(t, false)
	b := stockBundle(in, false)
	dir := t.TempDir()
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, KeyFile)
	if err := os.Chmod(keyPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteDir(dir); err != nil {
		t.Fatalf("writing the same bundle again: %v", err)
	}
	if m := mode(t, keyPath); m != 0o600 {
		t.Errorf("host.key mode %v after a rewrite, want 0600", m)
	}

	other := issue(t, false)
	b2 := stockBundle(other, false)
	err := b2.WriteDir(dir)
	if !errors.Is(err, ErrKeyExists) {
		t.Fatalf("WriteDir over a different key = %v, want ErrKeyExists", err)
	}
	for _, secret := range [][]byte{in.key, other.key} {
		if body := strings.Split(string(secret), "\n")[1]; strings.Contains(err.Error(), body) {
			t.Fatalf("the error holds a key: %v", err)
		}
	}
	for name, want := range map[string][]byte{KeyFile: in.key, CertFile: in.cert, CAFile: in.ca} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, want) {
			t.Errorf("%s changed by a refused write", name)
		}
	}

	b2.Key = nil // the device keeps its own: certificate and CA replaced, host.key left
	if err := b2.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(keyPath); !bytes.Equal(got, in.key) {
		t.Error("a bundle without a key changed host.key")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, CertFile)); !bytes.Equal(got, other.cert) {
		t.Error("host.crt not replaced")
	}

	bad := b
	bad.Lighthouses = nil
	missing := filepath.Join(t.TempDir(), "never")
	if err := bad.WriteDir(missing); err == nil {
		t.Fatal("WriteDir wrote an invalid bundle")
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an invalid bundle created its directory (stat: %v)", err)
	}
}
