package agenttest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/pki"
)

// TestCARotation: `ca rotate --now` across in-process agents (two control
// nodes, two workers out of the gossip pool, the default). Nothing
// restarts: every member stays alive and no overlay reload is refused. A token minted before the rotation
// joins during it (the seeds' leaves are already reissued: they answer
// with the leaf they held under the old CA) and holds the old CA in the
// bundles until it is used; then the old CA is dropped everywhere: every
// node trusts only the new CA and runs TLS and Nebula certificates issued
// by it, the CA holder's ca/ holds it, and a token minted after joins.
func TestCARotation(t *testing.T) {
	clock := &agenttest.Clock{}
	quick := func(c *config.File) { c.ReconcileInterval = 200 * time.Millisecond }
	origin := agenttest.NewNodeAt(t, "origin", agenttest.TakeIP(t), clock, quick)
	origin.Init(t, "alpha")
	nodes := []*agenttest.Node{origin}
	join := func(name, role, token string) *agenttest.Node {
		t.Helper()
		nd := agenttest.NewNodeAt(t, name, agenttest.TakeIP(t), clock, quick)
		if _, err := nd.Join(t, token); err != nil {
			t.Fatalf("join %s: %v\n%s", name, err, nd.Logs())
		}
		nodes = append(nodes, nd)
		return nd
	}
	for _, n := range []struct{ name, role string }{{"c2", "control"}, {"w1", "worker"}, {"w2", "worker"}} {
		join(n.name, n.role, origin.Admit(t, apitype.AdmitRequest{Name: n.name, Role: n.role}))
	}
	oldToken := origin.Admit(t, apitype.AdmitRequest{Name: "w3", Role: "worker"})
	oldCA := caFingerprint(t, origin)

	st, err := origin.Client.RotateCA(t.Context(), apitype.CARotateRequest{Now: true})
	if err != nil {
		t.Fatalf("ca rotate --now: %v\n%s", err, origin.Logs())
	}
	if st.Phase != "reissue" || st.Next == "" || st.Signing != st.Next || len(st.Tokens) != 1 {
		t.Fatalf("after rotate --now (w3's token unused): %+v", st)
	}
	if _, err := c2Of(nodes).Client.RotateCA(t.Context(), apitype.CARotateRequest{Now: true}); err == nil {
		t.Fatal("ca rotate on a control node without the CA keys succeeded")
	}
	w3 := join("w3", "worker", oldToken)

	var last apitype.CAStatus
	agenttest.WaitFor(t, t.Context(), 30*time.Second, func() error {
		s, err := origin.Client.CAStatus(t.Context())
		if err != nil {
			return err
		}
		last = *s
		if s.Phase != "none" {
			return fmt.Errorf("phase %s: %+v", s.Phase, s)
		}
		return nil
	})
	if last.Current != st.Next || last.Rotated.IsZero() {
		t.Fatalf("after the rotation: %+v, want current %s", last, st.Next)
	}
	for _, n := range nodes {
		agenttest.WaitFor(t, t.Context(), 20*time.Second, func() error { return runsOnly(n, st.Next) })
	}
	// Raft's term is not compared here: with this harness's 100 ms
	// leader lease a loaded machine elects now and then whatever runs;
	// e2e.TestCARotationPings checks it at the default timers.
	// Every node sees every other alive and its overlay up: waited for,
	// as a loaded machine may have a member suspected for a moment
	// (failed once with all else in place, make test 2026-12-01).
	// The control nodes' gossip holds the two of them (the workers are out
	// of the pool, the default); every node's node list shows the others
	// alive (a worker's by the control nodes' verdict).
	for _, n := range nodes {
		agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
			s, err := n.Client.Status(t.Context())
			if err != nil {
				return err
			}
			inPool := n.Name == "origin" || n.Name == "c2"
			switch {
			case inPool && (s.Gossip == nil || s.Gossip.Alive != 2 || s.Gossip.Members != 2):
				return fmt.Errorf("%s after the rotation: gossip %+v, want the 2 control nodes alive", n.Name, s.Gossip)
			case !inPool && (s.Gossip != nil || !s.OutOfPool):
				return fmt.Errorf("%s after the rotation: gossip %+v, out of the pool %v; want a worker out of the pool", n.Name, s.Gossip, s.OutOfPool)
			case s.Overlay == nil || s.Overlay.Error != nil:
				return fmt.Errorf("%s after the rotation: overlay %+v", n.Name, s.Overlay)
			}
			list, err := n.Client.NodeList(t.Context(), false)
			if err != nil {
				return err
			}
			alive := 0
			for _, r := range list {
				if r.Gossip == "alive" {
					alive++
				}
			}
			if alive != len(nodes) {
				return fmt.Errorf("%s after the rotation: %d of %d nodes alive in its node list: %+v", n.Name, alive, len(nodes), list)
			}
			return nil
		})
	}
	if ca, err := pki.LoadCA(filepath.Join(origin.Dir, "ca")); err != nil || ca.Fingerprint().String() != st.Next {
		t.Fatalf("ca/ after the rotation: %v, err %v", ca, err)
	}
	if _, err := os.Stat(filepath.Join(origin.Dir, "ca", "next")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ca/next left behind: %v", err)
	}
	if oldCA == st.Next {
		t.Fatal("the CA did not change")
	}
	_ = w3
	join("w4", "worker", origin.Admit(t, apitype.AdmitRequest{Name: "w4", Role: "worker"}))
}

func c2Of(nodes []*agenttest.Node) *agenttest.Node {
	for _, n := range nodes {
		if n.Name == "c2" {
			return n
		}
	}
	return nil
}

func caFingerprint(t *testing.T, n *agenttest.Node) string {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(n.Dir, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := id.CAFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	return fp.String()
}

// runsOnly checks n's saved identity: its bundles hold the CA ca alone,
// and its TLS leaf and Nebula cert are issued by it.
func runsOnly(n *agenttest.Node, ca string) error {
	id, err := pki.LoadIdentity(filepath.Join(n.Dir, "identity"))
	if err != nil {
		return err
	}
	cas, err := pki.BundleCerts(id.CACert)
	if err != nil || len(cas) != 1 || pki.FingerprintOf(cas[0]).String() != ca {
		return fmt.Errorf("%s trusts %d CAs (err %v)", n.Name, len(cas), err)
	}
	if !pki.IssuedBy(id.CACert, id.Cert) {
		return fmt.Errorf("%s runs a TLS leaf of another CA", n.Name)
	}
	if !pki.NebulaIssuedBy(id.NebulaCACert, id.NebulaCert) {
		return fmt.Errorf("%s runs a Nebula cert of another CA", n.Name)
	}
	return nil
}
