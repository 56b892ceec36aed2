package agenttest_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// TestPingGroupsFirewall runs a cluster of userspace nodes (origin, w1 in
// node group db, w2 in ops) and checks, through the local API:
//   - the node groups reach the record and w1's Nebula certificate;
//   - ping answers with an RTT between members and the tunnel's path
//     (direct to the peer's underlay address and Nebula port),
//     NodeUnknown for a name nobody holds;
//   - w2's inbound rule for group db lets w1's probes (to a closed port:
//     --port) in and drops the origin's; a reload of w2 switching the rule to group control flips
//     both, without restarting anything; a bad rule is refused with
//     FirewallRule and changes nothing;
//   - the gossip port stays open whatever the rules say (gossip rides the
//     overlay), and a port out of range is BadRequest.
func TestPingGroupsFirewall(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	w2 := agenttest.NewNode(t, "w2", clock)
	origin.Init(t, "alpha")
	for _, j := range []struct {
		n     *agenttest.Node
		group string
	}{{w1, "db"}, {w2, "ops"}} {
		tok := origin.Admit(t, apitype.AdmitRequest{Name: j.n.Name, Groups: []string{j.group}})
		if _, err := j.n.Join(t, tok); err != nil {
			t.Fatalf("join %s: %v", j.n.Name, err)
		}
	}

	crtPEM, err := os.ReadFile(filepath.Join(w1.Dir, "identity", "nebula", "host.crt"))
	if err != nil {
		t.Fatal(err)
	}
	crt, _, err := cert.UnmarshalCertificateFromPEM(crtPEM)
	if err != nil || !slices.Equal(crt.Groups(), []string{"worker", "db"}) {
		t.Fatalf("w1's Nebula certificate groups %v (%v), want [worker db]", crt.Groups(), err)
	}
	for _, n := range origin.Nodes(t) {
		if n.Name == "w1" && !slices.Equal(n.Groups, []string{"db"}) {
			t.Errorf("w1's row groups %v, want [db]", n.Groups)
		}
	}

	// probe pings from `from` to `to` until the answer is want (the first
	// probe may wait for a handshake or a reload), within 15 s. port 0 is
	// the gossip port, always open; another goes through the firewall.
	probePort := func(from *agenttest.Node, to string, port int, want bool) apitype.PingReply {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			r, err := from.Client.Ping(t.Context(), apitype.PingRequest{Name: to, Timeout: 500 * time.Millisecond, Port: port})
			if err != nil {
				t.Fatalf("ping %s from %s: %v", to, from.Name, err)
			}
			if r.Answered == want {
				return *r
			}
			if time.Now().After(deadline) {
				t.Fatalf("ping %s from %s: answered %t, want %t", to, from.Name, r.Answered, want)
			}
		}
	}
	// a port nobody listens on: the reset is the answer, through w2's
	// inbound firewall
	const closed = 7999
	probe := func(from *agenttest.Node, to string, want bool) apitype.PingReply {
		t.Helper()
		return probePort(from, to, closed, want)
	}
	r := probePort(origin, "w1", 0, true)
	if r.RTT <= 0 || r.OverlayIP == "" || r.Port == 0 || (r.Answer != "accepted" && r.Answer != "refused") {
		t.Errorf("answered probe %+v: want an RTT, the overlay IP, the port and the kind of answer", r)
	}
	t.Logf("origin -> w1: %+v", r)
	// The path: the tunnel Nebula holds after the probe, straight to w1's
	// underlay address (its record's, every listener on its loopback
	// address) and Nebula port.
	var w1Underlay string
	for _, n := range origin.Nodes(t) {
		if n.Name == "w1" {
			w1Underlay = n.Underlay
		}
	}
	wantPath := apitype.PingPath{Direct: net.JoinHostPort(w1Underlay, strconv.Itoa(config.Default().Ports.Nebula))}
	if w1Underlay != w1.IP || r.Path == nil || *r.Path != wantPath {
		t.Errorf("origin -> w1 path %+v (w1's record's underlay %q), want %+v", r.Path, w1Underlay, wantPath)
	}
	probe(w1, "origin", true)
	if _, err := origin.Client.Ping(t.Context(), apitype.PingRequest{Name: "nobody"}); codes.Of(err) != codes.NodeUnknown {
		t.Errorf("ping nobody: %v, want %s", err, codes.NodeUnknown)
	}

	reload := func(rule mesh.FirewallRule) {
		t.Helper()
		w2.SetConfigFile(func(c *config.File) { c.Firewall.Inbound = []mesh.FirewallRule{rule} })
		ws, err := w2.Client.Reload(t.Context())
		if err != nil || len(ws) != 0 {
			t.Fatalf("reload w2: %v %v", ws, err)
		}
	}
	reload(mesh.FirewallRule{Port: "any", Proto: "tcp", Group: "db"})
	probe(w1, "w2", true)
	probe(origin, "w2", false)

	reload(mesh.FirewallRule{Port: "any", Proto: "tcp", Group: "control"})
	probe(origin, "w2", true)
	probe(w1, "w2", false)

	w2.SetConfigFile(func(c *config.File) {
		c.Firewall.Inbound = []mesh.FirewallRule{{Port: "any", Proto: "tcp", Group: "no_such"}}
	})
	// The config checker lists the bad rule, with its code, under
	// ReloadRefused.
	if _, err := w2.Client.Reload(t.Context()); codes.Of(err) != codes.ReloadRefused || !strings.Contains(err.Error(), string(codes.FirewallRule)) {
		t.Fatalf("reload with a bad rule: %v, want %s naming %s", err, codes.ReloadRefused, codes.FirewallRule)
	}
	probe(origin, "w2", true)
	probe(w1, "w2", false)
	// gossip's port stays open whatever the firewall says: w1 still
	// reaches w2 for membership
	probePort(w1, "w2", 0, true)
	if _, err := w1.Client.Ping(t.Context(), apitype.PingRequest{Name: "w2", Port: 70000}); codes.Of(err) != codes.BadRequest {
		t.Errorf("ping port 70000: %v, want %s", err, codes.BadRequest)
	}
}
