package preflight

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestHostChecks: a taken port is codes.PortInUse naming what listens
// there; a free one passes and is given back; a state dir that does not
// take a file, or has less room than needed, is codes.StateDir.
func TestHostChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	taken := listenPort{name: "control", port: port, tcp: true}
	if err := taken.free("127.0.0.1"); codes.Of(err) != codes.PortInUse {
		t.Errorf("taken port: %v, want %s", err, codes.PortInUse)
	}
	_ = ln.Close()
	if err := taken.free("127.0.0.1"); err != nil {
		t.Errorf("freed port: %v", err)
	}
	if err := taken.free("127.0.0.1"); err != nil {
		t.Errorf("a check must give the port back: %v", err)
	}

	dir := t.TempDir()
	if free, err := checkStateDir(dir, 1); err != nil || free == 0 {
		t.Errorf("writable dir: %d free, %v", free, err)
	}
	if _, err := checkStateDir(filepath.Join(dir, "missing"), 1); codes.Of(err) != codes.StateDir {
		t.Errorf("missing dir: %v, want %s", err, codes.StateDir)
	}
	if _, err := checkStateDir(dir, 1<<62); codes.Of(err) != codes.StateDir {
		t.Errorf("no room: %v, want %s", err, codes.StateDir)
	}
}
