package state

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestAdmitPicksLowestFreeIP: an admission that names no overlay IP gets
// the lowest free host address, chosen while the entry applies, and the
// node is recorded as joining with its keys and no certificate. In
// admitFixture the origin holds .1, w9 .9 and the removed gone .5.
func TestAdmitPicksLowestFreeIP(t *testing.T) {
	f := admitFixture(t)
	mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
	n, ok := f.Node("n-w1")
	if !ok || n.OverlayIP != netip.MustParseAddr("10.42.0.2") {
		t.Fatalf("w1 recorded at %v (%v), want 10.42.0.2", n.OverlayIP, ok)
	}
	if n.State != NodeJoining || !bytes.Equal(n.TLSPublicKey, []byte("tls-key-w1")) ||
		!bytes.Equal(n.NebulaPublicKey, []byte("nebula-pub-w1")) || n.TLSFingerprint != "" || n.NebulaFingerprint != "" ||
		len(n.TLSCert) != 0 || len(n.NebulaCert) != 0 {
		t.Fatalf("w1 recorded as %+v, want joining with its keys and no certificate", n)
	}
	if !f.IPAllocated(n.OverlayIP) {
		t.Fatal("the picked IP is not allocated")
	}
	if rec, _ := f.Token(secret(1).Hash()); rec.ConsumedBy != "n-w1" {
		t.Fatalf("token consumed by %q", rec.ConsumedBy)
	}
	// .2 is now taken too; .3 is next, then .4; .5 stays the removed node's.
	mustApply(t, f, joinCmd(2, "n-c1", "c1", pki.RoleControl))
	if c1, _ := f.Node("n-c1"); c1.OverlayIP != netip.MustParseAddr("10.42.0.3") {
		t.Fatalf("c1 recorded at %v, want 10.42.0.3", c1.OverlayIP)
	}
}

// TestAdmitConcurrentNoCollision: two admissions without an IP, built
// from the same state (as two control nodes would, at once), both apply
// and get different IPs.
func TestAdmitConcurrentNoCollision(t *testing.T) {
	f := admitFixture(t)
	a, b := joinCmd(1, "n-w1", "w1", pki.RoleWorker), joinCmd(2, "n-c1", "c1", pki.RoleControl)
	mustApply(t, f, a)
	mustApply(t, f, b)
	na, _ := f.Node("n-w1")
	nb, _ := f.Node("n-c1")
	if !na.OverlayIP.IsValid() || na.OverlayIP == nb.OverlayIP {
		t.Fatalf("IPs %v and %v, want two different ones", na.OverlayIP, nb.OverlayIP)
	}
}

// TestAdmitJoiningRefusals: a joining admission needs both public keys
// and carries no certificate; a named IP must be free.
func TestAdmitJoiningRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*Admit)
		want    codes.Code
		ipTaken bool
	}{
		{name: "fail/no-tls-key", edit: func(a *Admit) { a.Admission.TLSPublicKey = nil }, want: codes.BadRequest},
		{name: "fail/two-tls-keys", edit: func(a *Admit) { a.Node.TLSPublicKey = []byte("other") }, want: codes.BadRequest},
		{name: "fail/no-nebula-key", edit: func(a *Admit) { a.Admission.NebulaPub = nil }, want: codes.BadRequest},
		{name: "fail/cert-without-fingerprint", edit: func(a *Admit) { a.Node.TLSCert = []byte("pem") }, want: codes.BadRequest},
		{name: "fail/claims-active", edit: func(a *Admit) { a.Node.State = NodeActive }, want: codes.BadRequest},
		{name: "fail/node-names-ip", edit: func(a *Admit) { a.Node.OverlayIP = netip.MustParseAddr("10.42.0.7") }, want: codes.BadRequest},
		{name: "fail/named-ip-taken", edit: func(a *Admit) { a.Admission.OverlayIP = netip.MustParsePrefix("10.42.0.9/16") }, ipTaken: true},
		{name: "ok/named-ip-free", edit: func(a *Admit) { a.Admission.OverlayIP = netip.MustParsePrefix("10.42.0.7/16") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := admitFixture(t)
			cmd := joinCmd(1, "n-w1", "w1", pki.RoleWorker)
			tc.edit(&cmd)
			before := stateBytes(t, f)
			err := apply(t, f, cmd)
			switch {
			case tc.ipTaken:
				if !isIPTaken(err) {
					t.Fatalf("err = %v, want enroll.ErrIPTaken", err)
				}
			case tc.want != "":
				if codes.Of(err) != tc.want {
					t.Fatalf("err = %v, want code %s", err, tc.want)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if n, _ := f.Node("n-w1"); n.OverlayIP != netip.MustParseAddr("10.42.0.7") || n.State != NodeJoining {
					t.Fatalf("recorded %+v", n)
				}
				return
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("a refused admission changed the state")
			}
		})
	}
}

// TestRecordCerts: only a joining node without certificates takes them
// (and becomes active); an active, removed, left, unknown or already
// certified node is refused and nothing changes.
// joinedWith is a fixture FSM with w1 joining, its record then edited by
// edit directly (no command writes such records).
func joinedWith(edit func(*Node)) func(*testing.T) *FSM {
	return func(t *testing.T) *FSM {
		f := admitFixture(t)
		mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
		n := f.s.Nodes["n-w1"]
		edit(&n)
		f.s.Nodes["n-w1"] = n
		f.view.Store(nil) // as Apply does after a change: Nodes must not serve the list from before the edit
		return f
	}
}

func TestRecordCerts(t *testing.T) {
	joined := func(t *testing.T) *FSM {
		f := admitFixture(t)
		mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
		return f
	}
	for _, tc := range []struct {
		name string
		fsm  func(*testing.T) *FSM
		cmd  RecordCerts
		want codes.Code
	}{
		{name: "ok/joining", fsm: joined, cmd: certsCmd("n-w1")},
		{name: "fail/unknown", fsm: joined, cmd: certsCmd("n-nobody"), want: codes.NodeUnknown},
		{name: "fail/active-v1", fsm: joined, cmd: certsCmd("n-w9"), want: codes.BadRequest},
		{name: "fail/removed", fsm: joined, cmd: certsCmd("n-gone"), want: codes.BadRequest},
		{name: "fail/origin", fsm: joined, cmd: certsCmd(originID), want: codes.BadRequest},
		{name: "fail/twice", fsm: func(t *testing.T) *FSM {
			f := joined(t)
			mustApply(t, f, certsCmd("n-w1"))
			return f
		}, cmd: certsCmd("n-w1"), want: codes.BadRequest},
		{name: "fail/removed-while-joining", fsm: func(t *testing.T) *FSM {
			f := joined(t)
			mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0.Add(time.Minute)})
			return f
		}, cmd: certsCmd("n-w1"), want: codes.BadRequest},
		// A joining record holding any one piece of a certificate (a state no
		// command writes, but a snapshot could hold) takes no more.
		{name: "fail/joining-with-tls-fingerprint", fsm: joinedWith(func(n *Node) { n.TLSFingerprint = "aa" }), cmd: certsCmd("n-w1"), want: codes.BadRequest},
		{name: "fail/joining-with-nebula-fingerprint", fsm: joinedWith(func(n *Node) { n.NebulaFingerprint = "bb" }), cmd: certsCmd("n-w1"), want: codes.BadRequest},
		{name: "fail/joining-with-tls-cert", fsm: joinedWith(func(n *Node) { n.TLSCert = []byte("pem") }), cmd: certsCmd("n-w1"), want: codes.BadRequest},
		{name: "fail/joining-with-nebula-cert", fsm: joinedWith(func(n *Node) { n.NebulaCert = []byte("pem") }), cmd: certsCmd("n-w1"), want: codes.BadRequest},
		{name: "fail/no-nebula-cert", fsm: joined, cmd: func() RecordCerts { c := certsCmd("n-w1"); c.NebulaCert = nil; return c }(), want: codes.BadRequest},
		{name: "fail/no-tls-fingerprint", fsm: joined, cmd: func() RecordCerts { c := certsCmd("n-w1"); c.TLSFingerprint = ""; return c }(), want: codes.BadRequest},
		{name: "fail/no-expiry", fsm: joined, cmd: func() RecordCerts { c := certsCmd("n-w1"); c.TLSExpires = time.Time{}; return c }(), want: codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fsm(t)
			before := stateBytes(t, f)
			err := apply(t, f, tc.cmd)
			if tc.want != "" {
				if codes.Of(err) != tc.want {
					t.Fatalf("err = %v, want code %s", err, tc.want)
				}
				if !bytes.Equal(before, stateBytes(t, f)) {
					t.Fatal("a refused RecordCerts changed the state")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n, _ := f.Node(tc.cmd.NodeID)
			if n.State != NodeActive || n.TLSFingerprint != tc.cmd.TLSFingerprint || n.NebulaFingerprint != tc.cmd.NebulaFingerprint ||
				!bytes.Equal(n.TLSCert, tc.cmd.TLSCert) || !bytes.Equal(n.NebulaCert, tc.cmd.NebulaCert) ||
				!n.TLSExpires.Equal(tc.cmd.TLSExpires) || !n.NebulaExpires.Equal(tc.cmd.NebulaExpires) ||
				!n.NebulaIssued.Equal(tc.cmd.At) || !n.Updated.Equal(tc.cmd.At) {
				t.Fatalf("after RecordCerts: %+v", n)
			}
			if last := f.Audit()[len(f.Audit())-1]; last.Code != codes.EventNodeActive || last.Subject != "w1" {
				t.Fatalf("last audit event %+v", last)
			}
		})
	}
}

// TestAbortAdmission: undoing a joining admission deletes the record,
// frees its IP and makes its token unused again, so the same token admits
// again (and gets the same, lowest free, IP). Any node that is not joining
// is refused and nothing changes.
func TestAbortAdmission(t *testing.T) {
	f := admitFixture(t)
	mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
	n, _ := f.Node("n-w1")
	mustApply(t, f, AbortAdmission{NodeID: "n-w1", At: t0.Add(2 * time.Minute), Actor: originID})
	if _, ok := f.Node("n-w1"); ok {
		t.Fatal("the aborted node is still recorded")
	}
	if _, ok := f.NodeByName("w1"); ok {
		t.Fatal("the aborted node's name is still held")
	}
	if f.IPAllocated(n.OverlayIP) {
		t.Fatalf("%v still allocated", n.OverlayIP)
	}
	if rec, _ := f.Token(secret(1).Hash()); rec.Consumed() || rec.ConsumedBy != "" {
		t.Fatalf("token after the abort: %+v, want unused", rec)
	}
	if last := f.Audit()[len(f.Audit())-1]; last.Code != codes.EventAdmissionAborted || last.Subject != "w1" {
		t.Fatalf("last audit event %+v", last)
	}
	mustApply(t, f, joinCmd(1, "n-w1b", "w1", pki.RoleWorker))
	if again, _ := f.Node("n-w1b"); again.OverlayIP != n.OverlayIP {
		t.Fatalf("readmitted at %v, want the freed %v", again.OverlayIP, n.OverlayIP)
	}

	mustApply(t, f, certsCmd("n-w1b"))
	for _, tc := range []struct {
		name, id string
		want     codes.Code
	}{
		{"fail/active", "n-w1b", codes.BadRequest},
		{"fail/active-v1", "n-w9", codes.BadRequest},
		{"fail/removed", "n-gone", codes.BadRequest},
		{"fail/origin", originID, codes.BadRequest},
		{"fail/unknown", "n-nobody", codes.NodeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stateBytes(t, f)
			if err := apply(t, f, AbortAdmission{NodeID: tc.id, At: t0.Add(3 * time.Minute)}); codes.Of(err) != tc.want {
				t.Fatalf("err = %v, want code %s", err, tc.want)
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("a refused abort changed the state")
			}
		})
	}
}

// TestAdmitKeepsTheNodesTLSKey: an admission that carries no TLS key of
// its own takes the one the node record brings (the ledger may fill either).
func TestAdmitKeepsTheNodesTLSKey(t *testing.T) {
	f := admitFixture(t)
	c := joinCmd(1, "n-w1", "w1", pki.RoleWorker)
	c.Node.TLSPublicKey, c.Admission.TLSPublicKey = []byte("node-key"), nil
	mustApply(t, f, c)
	if n, _ := f.Node("n-w1"); string(n.TLSPublicKey) != "node-key" || n.State != NodeJoining {
		t.Fatalf("recorded key %q, state %s", n.TLSPublicKey, n.State)
	}
}
