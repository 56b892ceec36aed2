package agenttest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// TestLeaveAndRemove: a worker leaves (recorded left, state wiped, meshd
// unjoined) and joins again at once under its old id and overlay IP; a control node removes another worker (recorded removed, its
// certificates revoked and blocked by every node's overlay, a worker's
// included) and a control node (out of raft); the CA holder can neither
// leave nor be removed.
func TestLeaveAndRemove(t *testing.T) {
	clock := &agenttest.Clock{}
	quick := func(c *config.File) { c.ReconcileInterval = 200 * time.Millisecond }
	origin := agenttest.NewNodeAt(t, "origin", agenttest.TakeIP(t), clock, quick)
	origin.Init(t, "alpha")
	nodes := map[string]*agenttest.Node{}
	for _, n := range []struct{ name, role string }{{"c2", "control"}, {"w1", "worker"}, {"w2", "worker"}, {"w3", "worker"}} {
		nd := agenttest.NewNodeAt(t, n.name, agenttest.TakeIP(t), clock, quick)
		if _, err := nd.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: n.name, Role: n.role})); err != nil {
			t.Fatalf("join %s: %v", n.name, err)
		}
		nodes[n.name] = nd
	}
	state := func(name string) string {
		for _, r := range origin.Nodes(t) {
			if r.Name == name {
				return r.State
			}
		}
		return "absent"
	}

	// w1 leaves.
	w1 := nodes["w1"]
	if err := w1.Client.Leave(t.Context()); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if st, _ := w1.Client.Status(t.Context()); st.State != "unjoined" {
		t.Fatalf("w1 after leave: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(w1.Dir, "node.json")); !os.IsNotExist(err) {
		t.Fatalf("w1 kept its node.json: %v", err)
	}
	if s := state("w1"); s != "left" {
		t.Fatalf("origin lists w1 as %q", s)
	}
	// Issue 11: its name is free at once, and it joins again from the same
	// meshd (its userspace overlay, which Nebula cannot stop in-process,
	// was parked and is taken over), keeping its node id and overlay IP.
	var before apitype.Node
	for _, r := range origin.Nodes(t) {
		if r.Name == "w1" {
			before = r
		}
	}
	if _, err := w1.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatalf("w1 joins again after leaving, without a restart: %v", err)
	}
	for _, r := range origin.Nodes(t) {
		if r.Name == "w1" && (r.State != "active" || r.ID != before.ID || r.OverlayIP != before.OverlayIP) {
			t.Fatalf("w1 after rejoin: %+v, want active with id %s and overlay %s", r, before.ID, before.OverlayIP)
		}
	}

	// w2 is removed from c2 (a follower): revoked everywhere.
	if err := nodes["c2"].Client.Remove(t.Context(), "w2"); err != nil {
		t.Fatalf("remove w2: %v", err)
	}
	if s := state("w2"); s != "removed" {
		t.Fatalf("origin lists w2 as %q", s)
	}
	for _, nd := range []*agenttest.Node{origin, nodes["c2"], nodes["w3"]} {
		agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
			st, err := nd.Client.Status(t.Context())
			if err != nil {
				return err
			}
			if st.Overlay == nil {
				return fmt.Errorf("%s reports no overlay yet", nd.Name)
			}
			if st.Overlay.Blocklist < 2 {
				return fmt.Errorf("%s blocks %d certificates", nd.Name, st.Overlay.Blocklist)
			}
			return nil
		})
	}

	// c2 is removed from raft by the origin.
	if err := origin.Client.Remove(t.Context(), "c2"); err != nil {
		t.Fatalf("remove c2: %v", err)
	}
	for _, r := range origin.Nodes(t) {
		if r.Name == "c2" && (r.State != "removed" || r.Raft != "none") {
			t.Fatalf("c2 after remove: %+v", r)
		}
	}
	origin.Admit(t, apitype.AdmitRequest{Name: "still-works"})

	// The CA holder stays.
	if err := origin.Client.Leave(t.Context()); codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("origin leave: %v, want %s", err, codes.CAHolderStays)
	}
	if err := nodes["w3"].Client.Remove(t.Context(), "origin"); codes.Of(err) != codes.NotControl {
		t.Fatalf("remove on a worker: %v, want %s", err, codes.NotControl)
	}
	if err := origin.Client.Remove(t.Context(), "nobody"); codes.Of(err) != codes.NodeUnknown {
		t.Fatalf("remove of an unknown node: %v, want %s", err, codes.NodeUnknown)
	}
}
