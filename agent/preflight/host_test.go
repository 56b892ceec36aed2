package preflight

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
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

// TestCheckHost: the join's own host checks are the plan's: a taken port
// of the token's role fails with PortInUse (a control token's raft port
// too, a worker's not; a worker's gossip port only in the gossip pool), unless this meshd's running node holds it (join
// --force), or, Nebula's, the overlay it parked; a state dir that takes no file fails with StateDir; passing,
// each check says what it found.
func TestCheckHost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	env := Env{Config: config.Default()}
	env.Config.BindAddr, env.Config.StateDir = "127.0.0.1", t.TempDir()
	env.Config.OverlayMode = config.OverlayUserspace
	env.Config.Ports.Raft = ln.Addr().(*net.TCPAddr).Port
	// Port 0 binds any free port: these checks pass.
	env.Config.Ports.Gossip, env.Config.Ports.Nebula, env.Config.Ports.Control = 0, 0, 0

	found, err := env.CheckHost(pki.RoleWorker, false)
	if err != nil || len(found) != 3 || strings.Contains(strings.Join(found, "; "), "port gossip") {
		t.Fatalf("worker out of the gossip pool: %v, %q; want 3 checks, no gossip port", err, found)
	}
	env.Config.GossipPool = true
	found, err = env.CheckHost(pki.RoleWorker, false)
	if err != nil || len(found) != 4 || !strings.Contains(strings.Join(found, "; "), "port gossip") {
		t.Fatalf("worker in the gossip pool: %v, %q; want 4 checks, the gossip port's among them", err, found)
	}
	env.Config.GossipPool = false
	if _, err := env.CheckHost(pki.RoleControl, false); codes.Of(err) != codes.PortInUse || !strings.Contains(err.Error(), "port raft") {
		t.Fatalf("control with its raft port taken: %v, want %s naming port raft", err, codes.PortInUse)
	}
	if _, err := env.CheckHost(pki.RoleControl, true); err != nil {
		t.Fatalf("control, ports held by this meshd's node: %v", err)
	}
	// Nebula's port held by the userspace overlay this meshd parked after
	// its earlier membership is its own, which the join takes over.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	env.Config.Ports.Nebula = pc.LocalAddr().(*net.UDPAddr).Port
	if _, err := env.CheckHost(pki.RoleWorker, false); codes.Of(err) != codes.PortInUse || !strings.Contains(err.Error(), "port nebula") {
		t.Fatalf("nebula port taken: %v, want %s naming port nebula", err, codes.PortInUse)
	}
	env.OverlayParked = true
	if _, err := env.CheckHost(pki.RoleWorker, false); err != nil {
		t.Fatalf("nebula port held by this meshd's parked overlay: %v", err)
	}
	env.Config.StateDir = filepath.Join(env.Config.StateDir, "missing")
	if _, err := env.CheckHost(pki.RoleWorker, false); codes.Of(err) != codes.StateDir {
		t.Fatalf("missing state dir: %v, want %s", err, codes.StateDir)
	}
}
