package member

import (
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/pki"
)

var updateGolden = flag.Bool("update", false, "rewrite agent/testdata/*.golden")

// TestConfigMapping keeps, in a golden file, how meshd.yaml and a node's
// facts become the configs of Nebula, serf, raft and the control plane:
// a changed default or a field mapped to the wrong place shows up here as
// a diff to review (go test ./agent -run TestConfigMapping -update).
func TestConfigMapping(t *testing.T) {
	control := &statedir.Facts{NodeID: "id-c1", Name: "c1", Role: pki.RoleControl,
		Overlay: netip.MustParsePrefix("10.42.0.1/16"), Underlay: netip.MustParseAddr("192.0.2.1"),
		GossipKeys: [][]byte{make([]byte, 32)}}
	worker := &statedir.Facts{NodeID: "id-w1", Name: "w1", Role: pki.RoleWorker,
		Overlay: netip.MustParsePrefix("10.42.0.2/16"), Underlay: netip.MustParseAddr("127.0.0.5"),
		GossipKeys: [][]byte{make([]byte, 32)}}
	worker6 := &statedir.Facts{NodeID: "id-w6", Name: "w6", Role: pki.RoleWorker,
		Overlay: netip.MustParsePrefix("10.42.0.3/16"), Underlay: netip.MustParseAddr("fd99::3"),
		GossipKeys: [][]byte{make([]byte, 32)}}
	prod := config.Default()
	test := config.Default()
	test.StateDir, test.BindAddr = "/tmp/state", "127.0.0.5"
	test.OverlayMode, test.Timers = config.OverlayUserspace, config.TimersFast
	test.Raft = config.RaftTiming{HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLease: 100 * time.Millisecond, PromoteTimeout: 3 * time.Second}
	test.NebulaCertLifetime = time.Hour
	test.OverlayMTU, test.OverlayRoutines = 1420, 2
	test.MaxClockSkew = 90 * time.Second

	got := map[string]any{}
	for name, c := range map[string]struct {
		cfg   config.File
		facts *statedir.Facts
	}{"production control node": {prod, control}, "test worker on loopback": {test, worker},
		"production worker on an IPv6 underlay": {prod, worker6}} {
		g := gossipConfig(c.cfg, c.facts, "v1.2.3")
		got[name] = map[string]any{
			"mesh":    c.cfg.MeshBase(c.facts.Role, c.facts.Underlay),
			"gossip":  g,
			"raft":    c.cfg.RaftNodeTiming(),
			"control": c.cfg.ControlConfig(c.facts.NodeID, c.facts.Name, filepath.Join(c.cfg.StateDir, statedir.CADir)),
			"port":    c.cfg.PortLimits(),
			"enroll":  c.cfg.EnrollConfig(),
			"pairs":   c.cfg.PairProbe(),
		}
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "configmap.golden")
	if *updateGolden {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	// A raft join waits up to promote_timeout; port 7300 must let its
	// answer through.
	long := config.Default()
	long.Raft.PromoteTimeout = 5 * time.Minute
	if l := long.PortLimits(); l.Answer <= long.Raft.PromoteTimeout {
		t.Fatalf("port 7300 answers within %s, a raft join may take %s", l.Answer, long.Raft.PromoteTimeout)
	}
	if string(want) != string(b)+"\n" {
		t.Fatalf("config mapping changed; review and run go test ./agent -run TestConfigMapping -update\ngot:\n%s", b)
	}
}
