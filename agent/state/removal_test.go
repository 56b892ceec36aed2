package state

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestRemovalRevokesEveryCertificate: removing a node revokes its current
// Nebula and TLS certificates, the TLS leaf a renewal replaced and every
// retired one, each once.
func TestRemovalRevokesEveryCertificate(t *testing.T) {
	f := admitFixture(t)
	w := admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2")
	w.Node.PrevTLSFingerprint = "tls-prev"
	w.Node.Retired = []string{"neb-old", "tls-old", "neb-old", "tls-prev"}
	mustApply(t, f, w)
	mustApply(t, f, RenewNebula{NodeID: "n-w1", Cert: []byte("c"), Fingerprint: "neb-new", Issued: t0,
		Expires: t0.Add(48 * time.Hour), At: t0})
	before := len(f.Revocations())
	at := t0.Add(time.Hour)
	mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: at})

	var got []string
	for _, r := range f.Revocations()[before:] {
		if r.NodeID != "n-w1" || !r.At.Equal(at) {
			t.Fatalf("revocation %+v", r)
		}
		got = append(got, r.Fingerprint)
	}
	want := []string{"neb-new", "aa-n-w1", "tls-prev", "neb-old", "tls-old", "bb-n-w1"}
	if !slices.Equal(got, want) {
		t.Fatalf("revoked %q, want %q", got, want)
	}
	// Removing it again revokes nothing more.
	mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: at.Add(time.Minute)})
	if n := len(f.Revocations()); n != before+len(want) {
		t.Fatalf("%d revocations after a second removal, want %d", n, before+len(want))
	}
}

// TestRenewNebulaRetiresReplacedCert: each renewal appends the certificate
// it replaces to Retired, once, and never the current one.
func TestRenewNebulaRetiresReplacedCert(t *testing.T) {
	f := bootstrapped(t)
	renew := func(fp string, days int) RenewNebula {
		return RenewNebula{NodeID: originID, Cert: []byte(fp), Fingerprint: fp, Issued: t0,
			Expires: t0.Add(time.Duration(days) * 24 * time.Hour), At: t0}
	}
	mustApply(t, f, renew("bb02", 400))
	mustApply(t, f, renew("bb03", 401))
	n, _ := f.Node(originID)
	if !slices.Equal(n.Retired, []string{"bb01", "bb02"}) || n.NebulaFingerprint != "bb03" {
		t.Fatalf("retired %q, current %s; want [bb01 bb02], bb03", n.Retired, n.NebulaFingerprint)
	}
}

// TestCAHolderCannotBeRemoved: the FSM itself refuses to remove the CA
// holder, whoever sent the command, and changes nothing.
func TestCAHolderCannotBeRemoved(t *testing.T) {
	f := bootstrapped(t)
	before := stateBytes(t, f)
	err := apply(t, f, SetNodeState{NodeID: originID, State: NodeRemoved, At: t0, Actor: "node:n-c9"})
	if codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("remove the CA holder: %v, want %s", err, codes.CAHolderStays)
	}
	tr, err := Track("req-ca", SetNodeState{NodeID: originID, State: NodeRemoved, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(t, f, tr); codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("tracked removal of the CA holder: %v", err)
	}
	n, _ := f.Node(originID)
	if n.State != NodeActive || len(f.Revocations()) != 0 {
		t.Fatalf("after refusals: %s, %d revocations", n.State, len(f.Revocations()))
	}
	if bytes.Equal(before, stateBytes(t, f)) {
		return
	}
	// Only the tracked request's remembered result may differ.
	if s := f.snapshot(); len(s.Requests) != 1 || s.Requests[0].Result != string(codes.CAHolderStays) {
		t.Fatalf("requests %+v", s.Requests)
	}
}

// TestNodesChangedSignalled: a command that changes a node record signals
// NodesChanged; one that does not (a token mint) or that fails does not;
// Apply never blocks on an unread signal.
func TestNodesChangedSignalled(t *testing.T) {
	f := New()
	drain := func() bool {
		select {
		case <-f.NodesChanged():
			return true
		default:
			return false
		}
	}
	mustApply(t, f, bootstrapCmd())
	if !drain() {
		t.Fatal("bootstrap not signalled")
	}
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	if drain() {
		t.Fatal("a token mint signalled a node change")
	}
	tr, err := Track("req-admit", admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, f, tr)
	if !drain() {
		t.Fatal("a tracked admission not signalled")
	}
	if err := apply(t, f, SetNodeState{NodeID: "nobody", State: NodeRemoved, At: t0}); err == nil {
		t.Fatal("removing an unknown node succeeded")
	}
	if drain() {
		t.Fatal("a failed command signalled")
	}
	// Nobody reads: further changes neither block nor queue up.
	for i := range 3 {
		mustApply(t, f, SetNodeState{NodeID: "n-w1", State: []NodeState{NodeActive, NodeLeft, NodeRemoved}[i], At: t0})
	}
	if !drain() || drain() {
		t.Fatal("want exactly one pending signal after three unread changes")
	}
	if err := f.Restore(persist(t, f)); err != nil {
		t.Fatal(err)
	}
	if !drain() {
		t.Fatal("restore not signalled")
	}
}
