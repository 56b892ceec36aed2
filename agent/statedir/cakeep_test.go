package statedir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestWipeStateKeepsCA: Wipe refuses a state dir whose ca/ holds
// anything, deleting nothing; WipeFailedInit (an init taking back its own
// new CA) removes it; with ca/ empty or absent Wipe wipes.
func TestWipeStateKeepsCA(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, CADir, "ca.key")
	node := filepath.Join(dir, NodeFile)
	for _, p := range []string{key, node} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Wipe(dir); codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("Wipe with CA keys: %v, want %s", err, codes.CAHolderStays)
	}
	for _, p := range []string{key, node} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s after the refused wipe: %v", p, err)
		}
	}
	if err := WipeFailedInit(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CADir)); !os.IsNotExist(err) {
		t.Fatalf("ca/ after WipeFailedInit: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, CADir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Wipe(dir); err != nil {
		t.Fatalf("Wipe with an empty ca/: %v", err)
	}
}

// TestClearCANext: a new rotation clears ca/next/, but one holding the
// current CA (a finished rotation whose move into ca/ did not happen yet)
// is moved into ca/ first, never deleted.
func TestClearCANext(t *testing.T) {
	old, cur := pkitest.NewCA(t, "alpha"), pkitest.NewCA(t, "alpha")
	dir := t.TempDir()
	if err := old.Save(filepath.Join(dir, CADir)); err != nil {
		t.Fatal(err)
	}
	if err := cur.Save(filepath.Join(dir, CADir, pki.CANextDir)); err != nil {
		t.Fatal(err)
	}
	if err := ClearCANext(dir, cur.Fingerprint().String()); err != nil {
		t.Fatal(err)
	}
	got, err := pki.LoadCA(filepath.Join(dir, CADir))
	if err != nil || got.Fingerprint() != cur.Fingerprint() {
		t.Fatalf("ca/ after clearing: %v %v, want the current CA", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, CADir, pki.CANextDir)); !os.IsNotExist(err) {
		t.Fatalf("ca/next not cleared: %v", err)
	}
	// An unused next of a rotation that never began is simply removed.
	stale := pkitest.NewCA(t, "alpha")
	if err := stale.Save(filepath.Join(dir, CADir, pki.CANextDir)); err != nil {
		t.Fatal(err)
	}
	if err := ClearCANext(dir, cur.Fingerprint().String()); err != nil {
		t.Fatal(err)
	}
	if got, _ := pki.LoadCA(filepath.Join(dir, CADir)); got == nil || got.Fingerprint() != cur.Fingerprint() {
		t.Fatal("a stale ca/next replaced ca/")
	}
	if _, err := os.Stat(filepath.Join(dir, CADir, pki.CANextDir)); !os.IsNotExist(err) {
		t.Fatalf("stale ca/next not removed: %v", err)
	}
}
