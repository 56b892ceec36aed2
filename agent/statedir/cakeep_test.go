package statedir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/codes"
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
