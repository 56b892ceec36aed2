//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestClonedStateDirRefused: a copy of a running worker's state dir,
// started by a real meshd on a machine with another /etc/machine-id (a
// mount namespace with another file bind-mounted over it), refuses to run
// the node with ClonedIdentity: no gossip, no overlay, every command but
// status answers the code. The original keeps running and reachable, and
// restarts fine on its own machine. node.json holds a hash of the
// machine-id, never the id. The remedy works: `join --force` with a token
// for a new name gives the copy its own identity.
func TestClonedStateDirRefused(t *testing.T) {
	n := NewNet(t)
	nodes := cluster(t, n, "w1")
	origin, w1 := nodes[0], nodes[1]
	allPairsPing(t, nodes, 10*time.Second)

	facts, err := os.ReadFile(filepath.Join(w1.Dir, "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.ReadFile("/etc/machine-id")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(facts), `"machine_id_sha256": "`) || strings.Contains(string(facts), strings.TrimSpace(string(host))) {
		t.Fatalf("w1's node.json should hold a hash of the machine-id and not the id:\n%s", facts)
	}

	clone := n.NewNode("clone")
	if err := os.RemoveAll(clone.Dir); err != nil {
		t.Fatal(err)
	}
	run(t, "cp", "-a", w1.Dir, clone.Dir) // while w1 runs, as a disk image would be taken
	other := make([]byte, 16)
	_, _ = rand.Read(other)
	clone.MachineID = filepath.Join(filepath.Dir(clone.Dir), "machine-id")
	if err := os.WriteFile(clone.MachineID, []byte(hex.EncodeToString(other)+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	clone.Start(t)

	var st apitype.Status
	if err := clone.CtlJSON(t.Context(), &st, "status"); err != nil {
		t.Fatal(err)
	}
	if st.State != "refused" || st.Error == nil || st.Error.ErrCode != codes.ClonedIdentity || st.Node != "w1" ||
		st.Gossip != nil || st.Overlay != nil {
		t.Fatalf("the clone's status: %+v (error %+v), want refused with %s for w1, without gossip or overlay", st, st.Error, codes.ClonedIdentity)
	}
	out := clone.MustCtl(t, "status")
	if !strings.Contains(out, string(codes.ClonedIdentity)) || !strings.Contains(out, "remedy:") {
		t.Errorf("meshctl status on the clone does not show the code and remedy:\n%s", out)
	}
	failsWith(t, clone, codes.ClonedIdentity, "nodes")
	failsWith(t, clone, codes.ClonedIdentity, "leave")

	// The original is untouched: it runs, the cluster sees it alive at its
	// own address, the overlay still reaches it; and it restarts fine.
	for _, from := range []*Node{origin, w1} {
		if s := gossipState(t, from, "w1"); s != "alive" {
			t.Errorf("%s sees w1 %q, want alive", from.NodeName, s)
		}
	}
	for _, x := range origin.Nodes(t) {
		if x.Name == "w1" && x.Underlay != w1.IP {
			t.Errorf("w1's record moved to %s", x.Underlay)
		}
	}
	allPairsPing(t, nodes, 10*time.Second)
	w1.Stop(t)
	w1.Start(t)
	if err := w1.CtlJSON(t.Context(), &st, "status"); err != nil || st.State != "running" {
		t.Fatalf("w1 after a restart on its own machine: %+v, %v", st, err)
	}
	Eventually(t, 10*time.Second, "origin reaches w1 after its restart", func() error {
		return origin.Ping(t.Context(), overlayIPs(t, origin)["w1"])
	})

	// The remedy: the copy joins as a node of its own.
	clone.MustCtl(t, "join", "--force", origin.Admit(t, "w1b"))
	if err := clone.CtlJSON(t.Context(), &st, "status"); err != nil || st.State != "running" || st.Node != "w1b" {
		t.Fatalf("the clone after join --force: %+v, %v", st, err)
	}
	Eventually(t, 10*time.Second, "w1 and w1b both alive", func() error {
		for _, name := range []string{"w1", "w1b"} {
			if s := gossipState(t, origin, name); s != "alive" {
				return fmt.Errorf("%s is %q", name, s)
			}
		}
		return nil
	})
}
