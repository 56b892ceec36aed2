package agenttest_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// forgeCluster is an origin and three workers; w3 is stopped, as if
// killed, before the forger speaks for it.
type forgeCluster struct {
	origin, w1, w2, w3 *agenttest.Node
	rows               map[string]apitype.Node // as the origin listed them while all ran
	keys               [][]byte                // the gossip key, as any member's node.json holds it
}

func newForgeCluster(t *testing.T) *forgeCluster {
	t.Helper()
	clock := &agenttest.Clock{}
	fc := &forgeCluster{origin: agenttest.NewNode(t, "origin", clock), rows: map[string]apitype.Node{}}
	fc.origin.Init(t, "alpha")
	for _, p := range []**agenttest.Node{&fc.w1, &fc.w2, &fc.w3} {
		name := fmt.Sprintf("w%d", len(fc.rows)+1)
		nd := agenttest.NewNode(t, name, clock)
		if _, err := nd.Join(t, fc.origin.Admit(t, apitype.AdmitRequest{Name: name})); err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
		*p = nd
		fc.rows[name] = apitype.Node{}
	}
	for _, r := range fc.origin.Nodes(t) {
		fc.rows[r.Name] = r
	}
	facts, err := statedir.Load(fc.w1.Dir)
	if err != nil {
		t.Fatal(err)
	}
	fc.keys = facts.GossipKeys
	fc.w3.Stop(t)
	waitGossip(t, fc.origin, "w3", func(st string) bool { return st != "alive" && st != "suspect" })
	return fc
}

// forger is serf speaking as w3: w3's id, role and overlay address in its
// tags, and a keyring report frozen at the current key, so a rotation
// would wait for it.
func (fc *forgeCluster) forger(t *testing.T, cfg gossip.Config) *gossip.Gossip {
	t.Helper()
	w3 := fc.rows["w3"]
	cfg.Name, cfg.Keys, cfg.Fast = "w3", fc.keys, true
	cfg.Tags = map[string]string{"id": w3.ID, "role": "worker", "ovl": w3.OverlayIP, "nport": "4242", "ver": "forged",
		"kr": "frozen"}
	g, err := gossip.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	return g
}

// gossipOf is name's gossip column on nd's `meshctl nodes`.
func gossipOf(t *testing.T, nd *agenttest.Node, name string) string {
	t.Helper()
	for _, r := range nd.Nodes(t) {
		if r.Name == name {
			return r.Gossip
		}
	}
	return "absent"
}

func waitGossip(t *testing.T, nd *agenttest.Node, name string, ok func(string) bool) {
	t.Helper()
	agenttest.WaitFor(t, t.Context(), 15*time.Second, func() error {
		if st := gossipOf(t, nd, name); !ok(st) {
			return fmt.Errorf("%s sees %s as %q", nd.Name, name, st)
		}
		return nil
	})
}

// holdsNotAlive samples the origin's view of w3 for d (fast timers: a
// forged member is gossiped to everyone within a second) and fails at the
// first sample that shows it alive or its version forged.
func (fc *forgeCluster) holdsNotAlive(t *testing.T, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, r := range fc.origin.Nodes(t) {
			if r.Name == "w3" && (r.Gossip == "alive" || r.Version == "forged") {
				t.Fatalf("the origin shows stopped w3 as gossip %q version %q: a forger spoke for it", r.Gossip, r.Version)
			}
		}
	}
}

// removeW1 removes w1 through the origin: its key rotation waits for every
// member gossip shows alive to report the new keys, so a forged alive w3
// with a frozen keyring report stalls it (X504506KEYSTL after 30 s).
func (fc *forgeCluster) removeW1(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	start := time.Now()
	if err := fc.origin.Client.Remove(ctx, "w1"); err != nil {
		t.Fatalf("remove w1 with a forger speaking for w3: %v (after %s)", err, time.Since(start))
	}
	t.Logf("remove w1 (its key rotation included) took %s", time.Since(start))
}

// TestGossipKeyIsNoIdentity is issue 27's attacks 2, 3 and 4 by a holder of
// the gossip key alone (a copy of any node.json). On main gossip listened
// on every node's underlay: the forger joined as killed w3, the origin
// showed w3 alive with the forger's version, and `remove w1` waited on its
// frozen keyring report until X504506KEYSTL; serf leave messages in w2's
// name made live w2 left and reloaded Nebula. Now gossip rides the
// overlay: nothing answers gossip on the underlay, so the key alone
// reaches no member.
func TestGossipKeyIsNoIdentity(t *testing.T) {
	fc := newForgeCluster(t)
	cfg := gossip.DefaultConfig()
	cfg.BindAddr = agenttest.TakeIP(t)
	g := fc.forger(t, cfg)
	var targets []string
	for _, nd := range []*agenttest.Node{fc.origin, fc.w1, fc.w2} {
		targets = append(targets, net.JoinHostPort(nd.IP, strconv.Itoa(gossip.DefaultPort)), // where gossip listened on main
			net.JoinHostPort(fc.rows[nd.Name].OverlayIP, strconv.Itoa(gossip.DefaultPort)))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if n, err := g.Join(ctx, targets); err == nil || n > 0 {
		t.Fatalf("a gossip key holder off the overlay joined %d members (%v)", n, err)
	}
	fc.holdsNotAlive(t, 2*time.Second)
	fc.removeW1(t)
	if st := gossipOf(t, fc.origin, "w2"); st != "alive" {
		t.Fatalf("live w2 shows %q", st)
	}
}

// TestGossipFromAnotherOverlayAddress is attacks 2 and 3 by an insider: w1's
// machine is taken (its meshd stopped, its certificate valid until it is
// removed), and the forger runs Nebula with w1's certificate and serf as w3
// on it. Nebula lets it in, but its packets come from w1's overlay
// address, not w3's: the origin does not count it (desired.Member), so w3
// stays not alive, its version is not the forger's, and removing w1 does
// not wait on the forged keyring report. Once removed, w1's certificate is
// blocked and the forger is cut off.
func TestGossipFromAnotherOverlayAddress(t *testing.T) {
	fc := newForgeCluster(t)
	fc.w1.Stop(t)
	originOvl := netip.MustParseAddr(fc.rows["origin"].OverlayIP)
	m := overlayAs(t, fc.w1.Dir, fc.origin, originOvl)
	cfg := gossip.DefaultConfig()
	w1ovl := netip.MustParseAddr(fc.rows["w1"].OverlayIP)
	cfg.BindAddr, cfg.Network = w1ovl.String(), m
	cfg.Overlay = netip.PrefixFrom(w1ovl, 16).Masked()
	g := fc.forger(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if n, err := g.Join(ctx, []string{net.JoinHostPort(originOvl.String(), strconv.Itoa(gossip.DefaultPort))}); err != nil || n != 1 {
		t.Fatalf("the forger with w1's certificate did not reach the origin over the overlay: %d, %v", n, err)
	}
	agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
		for _, mb := range g.Members() {
			if mb.Name == "origin" && mb.Status == gossip.StatusAlive {
				return nil
			}
		}
		return fmt.Errorf("the forger does not see the origin yet")
	})
	fc.holdsNotAlive(t, 2*time.Second)
	fc.removeW1(t)
	agenttest.WaitFor(t, t.Context(), 15*time.Second, func() error {
		for _, mb := range g.Members() {
			if mb.Name == "origin" && mb.Status == gossip.StatusAlive {
				return fmt.Errorf("the forger, with removed w1's certificate, still gossips with the origin")
			}
		}
		return nil
	})
}

// overlayAs starts a userspace Nebula with the identity under stateDir
// (a copy of a node's state, taken by an attacker), the origin its
// lighthouse. mesh.Stop does not stop a userspace Nebula (it would exit
// the process): it keeps that certificate until the test binary ends.
func overlayAs(t *testing.T, stateDir string, origin *agenttest.Node, originOvl netip.Addr) *mesh.Mesh {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(stateDir, statedir.IdentityDir))
	if err != nil {
		t.Fatal(err)
	}
	mc := mesh.DefaultConfig()
	mc.Userspace, mc.Fast = true, true
	mc.ListenHost, mc.ListenPort = agenttest.TakeIP(t), 4242
	mc.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	mc.CACert, mc.Cert, mc.Key = id.NebulaCACert, id.NebulaCert, id.NebulaKey
	mc.Lighthouses = []mesh.Lighthouse{{OverlayIP: originOvl,
		Underlay: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr(origin.IP), 4242)}}}
	m, err := mesh.Start(mc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLeftNodeKeyCopyJoinsNothing is issue 27's attack 5: a copy of a
// worker's state (node.json with the gossip key, its identity) taken
// before `meshctl leave`. Since issue 52 a leave revokes every
// certificate the node held (on main the copy still got onto the overlay
// with it and gossiped from the node's own overlay address), so the copy
// reaches nothing over the overlay; and the leave still owes a key
// rotation that the leader runs at once after its grace, so the copy's
// key is refused as well.
func TestLeftNodeKeyCopyJoinsNothing(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	origin.Init(t, "alpha")
	w1 := agenttest.NewNode(t, "w1", clock)
	if _, err := w1.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatal(err)
	}
	rows := map[string]apitype.Node{}
	for _, r := range origin.Nodes(t) {
		rows[r.Name] = r
	}
	stolen := t.TempDir()
	if out, err := exec.Command("cp", "-a", w1.Dir+"/.", stolen).CombinedOutput(); err != nil { // modes kept
		t.Fatalf("copy w1's state: %v: %s", err, out)
	}
	facts, err := statedir.Load(stolen)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w1.Client.Leave(t.Context()); err != nil {
		t.Fatalf("leave: %v", err)
	}
	old := state.KeyringID(facts.GossipKeys)
	agenttest.WaitFor(t, t.Context(), 20*time.Second, func() error {
		of, err := statedir.Load(origin.Dir)
		if err != nil {
			return err
		}
		if id := state.KeyringID(of.GossipKeys); id == old || len(of.GossipKeys) != 1 {
			return fmt.Errorf("the origin runs %d keys, keyring %s (the left node's: %s)", len(of.GossipKeys), id, old)
		}
		return nil
	})
	t.Logf("the origin ran a new gossip key %s after w1's leave", time.Since(start).Round(time.Millisecond))

	originOvl := netip.MustParseAddr(rows["origin"].OverlayIP)
	m := overlayAs(t, stolen, origin, originOvl)
	cfg := gossip.DefaultConfig()
	w1ovl := netip.MustParseAddr(rows["w1"].OverlayIP)
	cfg.Name, cfg.Keys, cfg.Fast = "w1", facts.GossipKeys, true
	cfg.BindAddr, cfg.Network = w1ovl.String(), m
	cfg.Overlay = netip.PrefixFrom(w1ovl, 16).Masked()
	cfg.Tags = map[string]string{"id": rows["w1"].ID, "role": "worker", "ovl": w1ovl.String()}
	g, err := gossip.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	// The overlay refuses the copy: its certificate is revoked.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		c, err := m.DialContext(ctx, "tcp", net.JoinHostPort(originOvl.String(), strconv.Itoa(gossip.DefaultPort)))
		cancel()
		if err == nil {
			_ = c.Close()
			t.Fatal("the copy of left w1 reached the origin's gossip port over the overlay: its certificate is not revoked")
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if n, err := g.Join(ctx, []string{net.JoinHostPort(originOvl.String(), strconv.Itoa(gossip.DefaultPort))}); err == nil || n > 0 {
		t.Fatalf("the copy of left w1's gossip key joined %d members (%v)", n, err)
	}
}
