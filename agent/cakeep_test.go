package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestWipeStateKeepsCA: wipeState refuses a state dir whose ca/ holds
// anything, deleting nothing; wipeFailedInit (an init taking back its own
// new CA) removes it; with ca/ empty or absent wipeState wipes.
func TestWipeStateKeepsCA(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, caDir, "ca.key")
	node := filepath.Join(dir, nodeFile)
	for _, p := range []string{key, node} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := wipeState(dir); codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("wipeState with CA keys: %v, want %s", err, codes.CAHolderStays)
	}
	for _, p := range []string{key, node} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s after the refused wipe: %v", p, err)
		}
	}
	if err := wipeFailedInit(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, caDir)); !os.IsNotExist(err) {
		t.Fatalf("ca/ after wipeFailedInit: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, caDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := wipeState(dir); err != nil {
		t.Fatalf("wipeState with an empty ca/: %v", err)
	}
}
