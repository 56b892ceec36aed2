//go:build e2e

package e2e

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// addConfig appends YAML lines to a node's meshd.yaml (before Start).
func (nd *Node) addConfig(t testing.TB, yaml string) {
	t.Helper()
	f, err := os.OpenFile(nd.Config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(yaml); err != nil {
		t.Fatal(err)
	}
}

// leafDigest is the SHA-256 of the TLS leaf a node has on disk.
func (nd *Node) leafDigest(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nd.Dir, "identity", "tls", "node.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))[:12]
}

func (nd *Node) status(t testing.TB) apitype.Status {
	t.Helper()
	var st apitype.Status
	if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil {
		t.Fatalf("%s: %v", nd.NodeName, err)
	}
	return st
}

// TestTLSRenewalLive: a cluster of three control nodes and a worker whose
// TLS leaves live 6 s (renewed between 4 and 4.5 s) goes through several renewals while
// it runs: every node's leaf (on disk and as status reports it) changes
// again and again and status's TLS expiry moves forward, the raft leader
// and term never change (no election: the renewal is adopted without
// restarting raft), the worker keeps reading the node list over mTLS, and
// an admission through a follower still works afterwards.
func TestTLSRenewalLive(t *testing.T) {
	const lifetime = "tls_lifetime: 6s\n"
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.addConfig(t, lifetime)
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	nodes := []*Node{origin}
	for _, name := range []string{"c2", "c3", "w1"} {
		nd := n.NewNode(name)
		nd.addConfig(t, lifetime)
		nd.Start(t)
		var extra []string
		if name != "w1" {
			extra = []string{"--role", "control"}
		}
		nd.MustCtl(t, "join", origin.Admit(t, name, extra...))
		nodes = append(nodes, nd)
	}
	controls, w1 := nodes[:3], nodes[3]

	first := origin.status(t)
	if first.Leader == "" || first.RaftTerm == 0 {
		t.Fatalf("no leader/term in the origin's status: %+v", first)
	}
	if got := first.TLSCertExpires.Sub(time.Now()); got > 7*time.Second {
		t.Fatalf("origin's TLS leaf expires in %s; tls_lifetime is 6s", got)
	}
	digests := map[string][]string{}
	expiries := map[string]time.Time{}
	for _, nd := range nodes {
		digests[nd.NodeName] = []string{nd.leafDigest(t)}
		expiries[nd.NodeName] = nd.status(t).TLSCertExpires
	}

	// Watch for 18 s: at a 4 s renewal interval every leaf is renewed
	// four times or so; require three renewals of each.
	deadline := time.Now().Add(18 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range nodes {
			st := nd.status(t)
			if st.TLSCertExpires.Before(expiries[nd.NodeName]) {
				t.Fatalf("%s: TLS expiry went back from %s to %s", nd.NodeName, expiries[nd.NodeName], st.TLSCertExpires)
			}
			expiries[nd.NodeName] = st.TLSCertExpires
			if !st.TLSCertExpires.After(time.Now()) {
				t.Fatalf("%s presents an expired TLS leaf (%s)", nd.NodeName, st.TLSCertExpires)
			}
			if d := nd.leafDigest(t); d != digests[nd.NodeName][len(digests[nd.NodeName])-1] {
				digests[nd.NodeName] = append(digests[nd.NodeName], d)
			}
			if slices.Contains(controls, nd) && (st.Leader != first.Leader || st.RaftTerm != first.RaftTerm) {
				t.Fatalf("%s: leader %s term %d, want %s term %d throughout (an election happened)",
					nd.NodeName, st.Leader, st.RaftTerm, first.Leader, first.RaftTerm)
			}
		}
		if _, errs, code := w1.Ctl(t.Context(), "nodes", "-o", "json"); code != 0 {
			t.Fatalf("the worker cannot read the node list over mTLS: %s", errs)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	for _, nd := range nodes {
		leaves := digests[nd.NodeName]
		t.Logf("%s: %d leaves seen: %s; TLS expiry now %s", nd.NodeName, len(leaves), strings.Join(leaves, " "),
			expiries[nd.NodeName].Format(time.RFC3339))
		if len(leaves) < 4 {
			t.Errorf("%s: %d leaves in 18 s, want at least 4 (three renewals)", nd.NodeName, len(leaves))
		}
	}
	last := origin.status(t)
	if !last.CertExpires.After(first.CertExpires) || last.CertExpiresOf != "tls" {
		t.Errorf("status cert_expires %s (%s), was %s: want it to move forward with the TLS leaf", last.CertExpires,
			last.CertExpiresOf, first.CertExpires)
	}

	// Admission (through a follower, signed by the CA holder) still works.
	w2 := n.NewNode("w2")
	w2.addConfig(t, lifetime)
	w2.Start(t)
	w2.MustCtl(t, "join", nodes[1].Admit(t, "w2"))
	if st := w2.status(t); st.State != "running" {
		t.Fatalf("w2 after join: %+v", st)
	}
	if st := origin.status(t); st.Leader != first.Leader || st.RaftTerm != first.RaftTerm {
		t.Fatalf("after the admission: leader %s term %d, want %s term %d", st.Leader, st.RaftTerm, first.Leader, first.RaftTerm)
	}
}

// removeResult runs `meshctl remove NAME` with the given extra flags as
// JSON on nd.
func removeResult(t testing.TB, nd *Node, name string, extra ...string) apitype.RemoveResponse {
	t.Helper()
	var r apitype.RemoveResponse
	if err := nd.CtlJSON(t.Context(), &r, append([]string{"remove", name}, extra...)...); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRemoveShowsConvergence: `meshctl remove w2` while w2 still runs lists
// every other member as having acknowledged the revocation within the
// bound (the removed node's own answer does not count); with w3 cut off
// the network, removing w1 exits 0 yet lists w3 as pending, with the
// RevocationPending warning, and `meshctl nodes` on another control node
// shows w1's revocation as pending on w3 and w2's as acknowledged.
func TestRemoveShowsConvergence(t *testing.T) {
	n := NewNet(t)
	nodes := controlCluster(t, n, "w1", "w2", "w3")
	origin, c2, w3 := nodes[0], nodes[1], byName(nodes, "w3")

	r := removeResult(t, origin, "w2")
	want := []string{"c2", "c3", "origin", "w1", "w3"}
	if !slices.Equal(r.Acked, want) || len(r.Pending) != 0 {
		t.Fatalf("remove w2: acknowledged %v, pending %v; want %v and none", r.Acked, r.Pending, want)
	}
	t.Logf("remove w2: %d members acknowledged revocation list version %d; the last %s after the removal was recorded (bound %s)",
		len(r.Acked), r.Version, r.LastAck.Round(time.Millisecond), r.Bound)

	w3.Cut()
	defer w3.Heal()
	start := time.Now()
	out, errs, code := origin.Ctl(t.Context(), "remove", "w1", "--wait", "3s")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("remove w1 with w3 cut off: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("remove w1 (w3 cut off) took %s:\n%s%s", took.Round(time.Millisecond), out, errs)
	if !strings.Contains(out, "pending (1, no answer within 3s): w3") || !strings.Contains(out, "acknowledged (3): c2, c3, origin") {
		t.Fatalf("remove w1 output does not list w3 as pending and the others as acknowledged:\n%s", out)
	}
	if !strings.Contains(errs, string(codes.RevocationPending)) {
		t.Fatalf("no %s warning on stderr:\n%s", codes.RevocationPending, errs)
	}
	// remove first rotates the gossip key, which waits for every live
	// member: the cut-off w3 counts as live until gossip suspects it
	// (a few seconds with the fast timers, longer on a loaded machine),
	// then the acknowledgement round waits its 3 s. Bounded either way
	// (30 s per rotation step at most); 6.3 s on a quiet machine.
	if took > 20*time.Second {
		t.Fatalf("remove waited %s; want the rotation's wait for w3's failure plus the 3 s acknowledgement bound", took)
	}
	Eventually(t, 5*time.Second, "c2 shows both rounds", func() error {
		rows := map[string]apitype.Node{}
		for _, x := range c2.Nodes(t) {
			rows[x.Name] = x
		}
		if got := rows["w1"].Revocation; got != "pending: w3" {
			return fmt.Errorf("w1's revocation %q", got)
		}
		if got := rows["w2"].Revocation; got != "acknowledged" {
			return fmt.Errorf("w2's revocation %q", got)
		}
		return nil
	})
	table := c2.MustCtl(t, "nodes")
	if !strings.Contains(table, "removed (revocation pending: w3)") {
		t.Fatalf("meshctl nodes does not show the pending revocation:\n%s", table)
	}
}
