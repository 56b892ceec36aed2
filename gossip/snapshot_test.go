package gossip

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestSnapshotProblem: every line serf writes passes; a cut last line, an
// unknown line or an alive line without an address is named.
func TestSnapshotProblem(t *testing.T) {
	good := "alive: c1 127.0.0.1:7946\nalive: c2 [::1]:7946\nnot-alive: w1\nclock: 12\nevent-clock: 3\n" +
		"query-clock: 0\ncoordinate: {\"Vec\":[0.1]}\n# comment\nleave\n"
	tests := []struct {
		name, in string
		bad      bool
	}{
		{"ok/empty", "", false},
		{"ok/every-line", good, false},
		{"fail/cut", good[:len(good)-3], true},
		{"fail/unknown", "alive: c1 127.0.0.1:7946\nzzz\n", true},
		{"fail/no-address", "alive: c1\n", true},
		{"fail/bad-address", "alive: c1 127.0.0.1:xyz\n", true},
		{"fail/bad-clock", "clock: -1\n", true},
		{"fail/bad-coordinate", "coordinate: {\"Vec\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := snapshotProblem([]byte(tt.in)); (got != "") != tt.bad {
				t.Fatalf("snapshotProblem(%q) = %q, want bad=%v", tt.in, got, tt.bad)
			}
		})
	}
}

// TestCheckSnapshotMovesAside: a corrupt snapshot is renamed to .corrupt
// (kept for a post-mortem), a good one is left alone.
func TestCheckSnapshotMovesAside(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	path := filepath.Join(dir, "snapshot")
	if err := os.WriteFile(path, []byte("alive: c1 127.0.0.1:7946\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkSnapshot(path, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("a good snapshot was moved: %v", err)
	}
	if err := os.WriteFile(path, []byte("alive: c1 127.0.0.1:79"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkSnapshot(path, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the corrupt snapshot is still in place: %v", err)
	}
	if b, err := os.ReadFile(path + ".corrupt"); err != nil || string(b) != "alive: c1 127.0.0.1:79" {
		t.Fatalf("the corrupt snapshot was not kept aside: %q, %v", b, err)
	}
}
