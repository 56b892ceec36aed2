package state

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// ephemeralNode admits name (token seed) as an ephemeral worker the way
// an admission of issue 31 records one (Admit with Node.Ephemeral),
// certifies and confirms it: an active ephemeral node.
func ephemeralNode(t *testing.T, f *FSM, seed byte, id, name string) Node {
	t.Helper()
	mustApply(t, f, MintToken{Record: tokenRecord(seed, name, pki.RoleWorker), Actor: "uid:0"})
	a := joinCmd(seed, id, name, pki.RoleWorker)
	a.Node.Ephemeral = true
	mustApply(t, f, a)
	mustApply(t, f, joiningCertsCmd(id))
	mustApply(t, f, ConfirmJoin{NodeID: id, At: t0.Add(3 * time.Minute), Actor: "node:" + id})
	n, ok := f.Node(id)
	if !ok || !n.Ephemeral || n.State != NodeActive {
		t.Fatalf("ephemeral %s: %+v, %v", name, n, ok)
	}
	return n
}

// TestForgetNode: a removed ephemeral node is forgotten: its record, its
// overlay IP's allocation and its acknowledgement round go, every
// revocation of its certificates stays, and the event is audited with
// its name, id and overlay IP. Its name is held by nothing (NodeByName,
// FormerNode) and its IP is the lowest free again: the next admission of
// the same name is a new record (not a reuse) at that IP.
func TestForgetNode(t *testing.T) {
	f := bootstrapped(t)
	w := ephemeralNode(t, f, 1, "n-w1", "w1")
	other := ephemeralNode(t, f, 2, "n-w2", "w2")
	mustApply(t, f, SetNodeState{NodeID: w.ID, State: NodeRemoved, At: t0.Add(4 * time.Minute), Actor: "node:ctl-0"})
	mustApply(t, f, RecordRevocationAcks{Ack: RevocationAck{NodeID: w.ID, Version: len(f.Revocations()),
		Acked: []string{"ctl-0"}, Pending: []string{"w2"}, At: t0.Add(4 * time.Minute)}, Actor: "node:ctl-0"})
	revoked := f.Revocations()
	if len(revoked) != 2 {
		t.Fatalf("%d revocations after the removal, want w1's TLS and Nebula certificates", len(revoked))
	}

	mustApply(t, f, ForgetNode{NodeID: w.ID, At: t0.Add(5 * time.Minute), Actor: "node:ctl-0"})
	if n, ok := f.Node(w.ID); ok {
		t.Fatalf("forgotten w1 still on record: %+v", n)
	}
	if _, ok := f.NodeByName("w1"); ok {
		t.Fatal("NodeByName finds the forgotten w1")
	}
	if n, ok := f.FormerNode("w1"); ok {
		t.Fatalf("FormerNode finds the forgotten w1: %+v", n)
	}
	if f.IPAllocated(w.OverlayIP) {
		t.Fatalf("w1's overlay IP %s is still allocated", w.OverlayIP)
	}
	if _, ok := f.RevocationAck(w.ID); ok {
		t.Fatal("w1's acknowledgement round is still on record")
	}
	if got := f.Revocations(); !reflect.DeepEqual(got, revoked) {
		t.Fatalf("revocations after forgetting w1:\n %+v\nwant them kept:\n %+v", got, revoked)
	}
	if n, ok := f.Node(other.ID); !ok || n.State != NodeActive || !f.IPAllocated(other.OverlayIP) {
		t.Fatalf("the other ephemeral node changed: %+v, %v", n, ok)
	}
	audit := f.Audit()
	last := audit[len(audit)-1]
	if last.Code != codes.EventNodeForgotten || last.Subject != "w1" || last.Actor != "node:ctl-0" ||
		!last.At.Equal(t0.Add(5*time.Minute)) || !strings.Contains(last.Detail, w.ID) ||
		!strings.Contains(last.Detail, w.OverlayIP.String()) {
		t.Fatalf("audit %+v; want %s for w1 with its id and overlay IP", last, codes.EventNodeForgotten)
	}

	// The freed IP is the lowest free one again, and the name is free: a
	// new admission of w1 is a fresh record there.
	if ip, err := f.FreeIP(); err != nil || ip != w.OverlayIP {
		t.Fatalf("FreeIP = %s, %v; want w1's freed %s", ip, err, w.OverlayIP)
	}
	mustApply(t, f, MintToken{Record: tokenRecord(3, "w1", pki.RoleWorker), Actor: "uid:0"})
	mustApply(t, f, joinCmd(3, "n-w1-again", "w1", pki.RoleWorker))
	n, ok := f.NodeByName("w1")
	if !ok || n.ID != "n-w1-again" || n.OverlayIP != w.OverlayIP || n.Prior != "" || n.State != NodeJoining {
		t.Fatalf("w1 admitted again: %+v, %v; want a fresh joining record at %s", n, ok, w.OverlayIP)
	}
	if got := f.Revocations(); !reflect.DeepEqual(got, revoked) {
		t.Fatal("the new admission changed the forgotten node's revocations")
	}
}

// TestForgetNodeRefuses: only a former node is forgotten (issue 52: any
// former one, not only a removed ephemeral one); an unknown node is
// NodeUnknown, an active or joining one BadRequest, with nothing changed.
func TestForgetNodeRefuses(t *testing.T) {
	f := bootstrapped(t)
	ephemeralNode(t, f, 1, "n-active", "active")
	ephemeralNode(t, f, 2, "n-left", "left")
	mustApply(t, f, SetNodeState{NodeID: "n-left", State: NodeLeft, At: t0.Add(4 * time.Minute)})
	mustApply(t, f, MintToken{Record: tokenRecord(3, "joining", pki.RoleWorker)})
	j := joinCmd(3, "n-joining", "joining", pki.RoleWorker)
	j.Node.Ephemeral = true
	mustApply(t, f, j)
	mustApply(t, f, MintToken{Record: tokenRecord(4, "failed", pki.RoleWorker)})
	fl := joinCmd(4, "n-failed", "failed", pki.RoleWorker)
	fl.Node.Ephemeral = true
	mustApply(t, f, fl)
	mustApply(t, f, FailJoin{NodeID: "n-failed", Cause: "never confirmed", At: t0.Add(4 * time.Minute)})
	mustApply(t, f, MintToken{Record: tokenRecord(5, "lasting", pki.RoleWorker)})
	mustApply(t, f, admitCmd(5, "n-lasting", "lasting", pki.RoleWorker, "10.42.0.50"))
	mustApply(t, f, SetNodeState{NodeID: "n-lasting", State: NodeRemoved, At: t0.Add(4 * time.Minute)})

	for _, tc := range []struct {
		name, id string
		want     codes.Code
	}{
		{"fail/unknown", "n-nobody", codes.NodeUnknown},
		{"fail/active", "n-active", codes.BadRequest},
		{"fail/joining", "n-joining", codes.BadRequest},
		{"fail/ca-holder", originID, codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stateBytes(t, f)
			err := apply(t, f, ForgetNode{NodeID: tc.id, At: t0.Add(5 * time.Minute), Actor: "node:ctl-0"})
			if codes.Of(err) != tc.want {
				t.Fatalf("forget %s: %v (code %q), want %s", tc.id, err, codes.Of(err), tc.want)
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("a refused ForgetNode changed the state")
			}
		})
	}
}

// TestForgetNodeKeepsAnotherNodesIP: the allocation of the forgotten
// node's overlay IP is deleted only when it is that node's.
func TestForgetNodeKeepsAnotherNodesIP(t *testing.T) {
	f := bootstrapped(t)
	w := ephemeralNode(t, f, 1, "n-w1", "w1")
	mustApply(t, f, SetNodeState{NodeID: w.ID, State: NodeRemoved, At: t0.Add(4 * time.Minute)})
	f.mu.Lock()
	f.s.IPAM[w.OverlayIP] = originID // a state no command makes: the IP held by another record
	f.mu.Unlock()
	mustApply(t, f, ForgetNode{NodeID: w.ID, At: t0.Add(5 * time.Minute)})
	f.mu.RLock()
	holder := f.s.IPAM[w.OverlayIP]
	f.mu.RUnlock()
	if holder != originID {
		t.Fatalf("%s held by %q after forgetting w1, want the origin's allocation kept", w.OverlayIP, holder)
	}
}

// TestForgetNodeSnapshot: a state after a forget persists and restores
// to the same state (no allocation, acknowledgement round or record of
// the forgotten node, its revocations kept), and the restored FSM
// applies the next admission as the original does.
func TestForgetNodeSnapshot(t *testing.T) {
	f := bootstrapped(t)
	w := ephemeralNode(t, f, 1, "n-w1", "w1")
	ephemeralNode(t, f, 2, "n-w2", "w2")
	mustApply(t, f, SetNodeState{NodeID: w.ID, State: NodeRemoved, At: t0.Add(4 * time.Minute)})
	mustApply(t, f, RecordRevocationAcks{Ack: RevocationAck{NodeID: w.ID, Version: len(f.Revocations()),
		Acked: []string{"ctl-0", "w2"}, At: t0.Add(4 * time.Minute)}})
	mustApply(t, f, ForgetNode{NodeID: w.ID, At: t0.Add(5 * time.Minute)})

	fresh := New()
	if err := fresh.Restore(persist(t, f)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if d := stateDiff(f.snapshot(), fresh.snapshot()); len(d) > 0 {
		t.Fatalf("restored state differs:\n%s", strings.Join(d, "\n"))
	}
	if _, ok := fresh.Node(w.ID); ok || fresh.IPAllocated(w.OverlayIP) || len(fresh.Revocations()) != 2 {
		t.Fatalf("restored: w1 on record %v, its IP allocated %v, %d revocations (want 2)",
			ok, fresh.IPAllocated(w.OverlayIP), len(fresh.Revocations()))
	}
	next := MintToken{Record: tokenRecord(3, "w3", pki.RoleWorker)}
	admit := joinCmd(3, "n-w3", "w3", pki.RoleWorker)
	for _, g := range []*FSM{f, fresh} {
		mustApply(t, g, next)
		mustApply(t, g, admit)
	}
	if !bytes.Equal(stateBytes(t, f), stateBytes(t, fresh)) {
		t.Fatal("the restored FSM applies the next admission differently")
	}
	if n, _ := fresh.Node("n-w3"); n.OverlayIP != w.OverlayIP {
		t.Fatalf("w3 got %s, want the freed %s", n.OverlayIP, w.OverlayIP)
	}
}

// TestEphemeralAllowed: only a worker may be ephemeral.
func TestEphemeralAllowed(t *testing.T) {
	if err := EphemeralAllowed(pki.RoleWorker); err != nil {
		t.Fatalf("worker: %v", err)
	}
	for _, r := range []pki.Role{pki.RoleControl, "", "nebula"} {
		if err := EphemeralAllowed(r); codes.Of(err) != codes.BadRole {
			t.Errorf("role %q: %v, want %s", r, err, codes.BadRole)
		}
	}
}

// TestForgetNodeSignalsNodesChanged: a forget is a change of node records
// (the control plane's watchers wake).
func TestForgetNodeSignalsNodesChanged(t *testing.T) {
	f := bootstrapped(t)
	w := ephemeralNode(t, f, 1, "n-w1", "w1")
	mustApply(t, f, SetNodeState{NodeID: w.ID, State: NodeRemoved, At: t0.Add(4 * time.Minute)})
	select { // drain the removal's signal
	case <-f.NodesChanged():
	default:
	}
	mustApply(t, f, ForgetNode{NodeID: w.ID, At: t0.Add(5 * time.Minute)})
	select {
	case <-f.NodesChanged():
	default:
		t.Fatal("no NodesChanged signal after a forget")
	}
	if slices.ContainsFunc(f.Nodes(), func(n Node) bool { return n.ID == w.ID }) {
		t.Fatal("Nodes still lists w1")
	}
}
