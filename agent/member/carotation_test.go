package member

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestLoadCAs: the CA holder's key pairs at start. ca/ alone; ca/ with a
// rotation's ca/next/; and a ca/ left unreadable by a crash while
// tidyCADir copied ca/next/ into it: the keys are read from ca/next/ (the
// only place the rotated keys still are) and nothing on disk is changed
// before raft confirms. A ca/next/ that does not load is an error, never
// ignored.
func TestLoadCAs(t *testing.T) {
	cur, next := pkitest.NewCA(t, "alpha"), pkitest.NewCA(t, "alpha")
	state := func(t *testing.T, withNext bool) string {
		dir := t.TempDir()
		if err := cur.Save(filepath.Join(dir, statedir.CADir)); err != nil {
			t.Fatal(err)
		}
		if withNext {
			if err := next.Save(filepath.Join(dir, statedir.CADir, caNextDir)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	t.Run("ok/ca-only", func(t *testing.T) {
		c, n, err := loadCAs(state(t, false))
		if err != nil || n != nil || c.Fingerprint() != cur.Fingerprint() {
			t.Fatalf("cur %v next %v err %v", c, n, err)
		}
	})
	t.Run("ok/with-next", func(t *testing.T) {
		c, n, err := loadCAs(state(t, true))
		if err != nil || c.Fingerprint() != cur.Fingerprint() || n == nil || n.Fingerprint() != next.Fingerprint() {
			t.Fatalf("cur %v next %v err %v", c, n, err)
		}
	})
	t.Run("ok/crash-mid-move", func(t *testing.T) {
		dir := state(t, true)
		// The move wrote next's key but not yet its certificate.
		key, err := os.ReadFile(filepath.Join(dir, statedir.CADir, caNextDir, "ca.key"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteFileAtomic(filepath.Join(dir, statedir.CADir, "ca.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		c, n, err := loadCAs(dir)
		if err != nil || n != nil || c.Fingerprint() != next.Fingerprint() {
			t.Fatalf("cur %v next %v err %v, want next as the CA", c, n, err)
		}
		if _, err := pki.LoadCA(filepath.Join(dir, statedir.CADir)); err == nil {
			t.Fatal("ca/ was rewritten at start, before raft confirmed the rotation")
		}
	})
	t.Run("fail/next-statedir.Corrupt", func(t *testing.T) {
		dir := state(t, true)
		if err := os.WriteFile(filepath.Join(dir, statedir.CADir, caNextDir, "ca.crt"), []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := loadCAs(dir); err == nil {
			t.Fatal("a statedir.Corrupt ca/next was ignored")
		}
	})
}
