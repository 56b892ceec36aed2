package state

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// admitFixture is a cluster with tokens minted for w1 (worker, seed 1),
// c1 (control, seed 2), ctl-0 (the origin's name, seed 3), w2 bound to
// 192.0.2.7 (seed 4), and gone (seed 5, whose node was admitted and then
// removed), plus an admitted w9 (seed 9) holding 10.42.0.9.
func admitFixture(t *testing.T) *FSM {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker), Actor: "uid:0"})
	mustApply(t, f, MintToken{Record: tokenRecord(2, "c1", pki.RoleControl)})
	mustApply(t, f, MintToken{Record: tokenRecord(3, "ctl-0", pki.RoleWorker)})
	bound := tokenRecord(4, "w2", pki.RoleWorker)
	bound.Addr = "192.0.2.7"
	mustApply(t, f, MintToken{Record: bound})
	mustApply(t, f, MintToken{Record: tokenRecord(9, "w9", pki.RoleWorker)})
	mustApply(t, f, admitCmd(9, "n-w9", "w9", pki.RoleWorker, "10.42.0.9"))
	mustApply(t, f, MintToken{Record: tokenRecord(5, "gone", pki.RoleWorker)})
	mustApply(t, f, admitCmd(5, "n-gone", "gone", pki.RoleWorker, "10.42.0.5"))
	mustApply(t, f, SetNodeState{NodeID: "n-gone", State: NodeRemoved, At: t0.Add(time.Minute)})
	return f
}

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fsm     func(*testing.T) *FSM // default admitFixture
		cmd     Admit
		edit    func(*Admit)
		want    codes.Code // "" with ipTaken false means success
		ipTaken bool
	}{
		{name: "ok/worker", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2")},
		{name: "ok/control", cmd: admitCmd(2, "n-c1", "c1", pki.RoleControl, "10.42.0.3")},
		{name: "ok/node-fields-from-admission", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Node.ID, a.Node.Name, a.Node.Role, a.Node.OverlayIP = "", "", "", netip.Addr{} }},
		{name: "ok/bound-addr", cmd: admitCmd(4, "n-w2", "w2", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.SourceAddr = "192.0.2.7" }},
		{name: "ok/name-of-removed-node", cmd: admitCmd(5, "n-gone2", "gone", pki.RoleWorker, "10.42.0.6"),
			edit: func(a *Admit) {
				// A fresh token for the removed node's name.
				a.Admission.Token = secret(6).Hash()
			},
			fsm: func(t *testing.T) *FSM {
				f := admitFixture(t)
				mustApply(t, f, MintToken{Record: tokenRecord(6, "gone", pki.RoleWorker)})
				return f
			}},
		{name: "ok/last-second", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.At = t0.Add(enroll.DefaultTTL - time.Second) }},

		{name: "fail/no-cluster", fsm: func(*testing.T) *FSM { return New() },
			cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"), want: codes.NotInCluster},
		{name: "fail/token-unknown", cmd: admitCmd(42, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"), want: codes.TokenUnknown},
		{name: "fail/token-consumed", cmd: admitCmd(9, "n-w9b", "w9", pki.RoleWorker, "10.42.0.2"), want: codes.TokenConsumed},
		{name: "fail/token-expired", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.At = t0.Add(enroll.DefaultTTL) }, want: codes.TokenExpired},
		{name: "fail/token-expired-long-ago", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.At = t0.Add(24 * time.Hour) }, want: codes.TokenExpired},
		{name: "fail/name-differs", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.Name = "w1x" }, want: codes.TokenNameDiffer},
		{name: "fail/node-name-differs", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Node.Name = "w1x" }, want: codes.TokenNameDiffer},
		{name: "ok/no-claimed-role", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.Role, a.Node.Role = "", "" }},
		{name: "fail/role-differs", cmd: admitCmd(1, "n-w1", "w1", pki.RoleControl, "10.42.0.2"), want: codes.BadRole},
		{name: "fail/admission-role-differs", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.Role, a.Node.Role = pki.RoleControl, "" }, want: codes.BadRole},
		{name: "fail/node-role-differs", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Node.Role = pki.RoleControl }, want: codes.BadRole},
		{name: "fail/wrong-addr", cmd: admitCmd(4, "n-w2", "w2", pki.RoleWorker, "10.42.0.2"), want: codes.TokenWrongAddr},
		{name: "fail/name-taken", cmd: admitCmd(3, "n-x", "ctl-0", pki.RoleWorker, "10.42.0.2"), want: codes.NameTaken},
		// Issue 11: a node that left holds its name no more.
		{name: "ok/name-freed-by-left-node", cmd: admitCmd(3, "n-x", "ctl-0", pki.RoleWorker, "10.42.0.2"),
			fsm: func(t *testing.T) *FSM {
				f := admitFixture(t)
				f.s.Cluster.CAHolder = "n-elsewhere" // the CA holder never leaves (CAHolderStays)
				mustApply(t, f, SetNodeState{NodeID: originID, State: NodeLeft, At: t0})
				return f
			}},
		{name: "fail/ip-taken", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.9"), ipTaken: true},
		{name: "fail/ip-taken-by-origin", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.1"), ipTaken: true},
		{name: "fail/ip-of-removed-node", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.5"), ipTaken: true},
		{name: "fail/ip-network", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.0"), want: codes.BadRequest},
		{name: "fail/ip-broadcast", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.255.255"), want: codes.BadRequest},
		{name: "fail/ip-outside", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.43.0.2"), want: codes.BadRequest},
		{name: "fail/ip-missing", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.OverlayIP = netip.Prefix{} }, want: codes.BadRequest},
		{name: "fail/prefix-bits", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Admission.OverlayIP = netip.MustParsePrefix("10.42.0.2/32") }, want: codes.BadRequest},
		{name: "fail/node-ip-differs", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Node.OverlayIP = netip.MustParseAddr("10.42.0.3") }, want: codes.BadRequest},
		{name: "fail/node-id-differs", cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
			edit: func(a *Admit) { a.Node.ID = "other" }, want: codes.BadRequest},
		{name: "fail/no-node-id", cmd: admitCmd(1, "", "w1", pki.RoleWorker, "10.42.0.2"), want: codes.BadRequest},
		{name: "fail/node-id-recorded", cmd: admitCmd(1, "n-w9", "w1", pki.RoleWorker, "10.42.0.2"), want: codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newFSM := admitFixture
			if tc.fsm != nil {
				newFSM = tc.fsm
			}
			f := newFSM(t)
			cmd := tc.cmd
			if tc.edit != nil {
				tc.edit(&cmd)
			}
			before := stateBytes(t, f)
			err := apply(t, f, cmd)
			switch {
			case tc.ipTaken:
				if !isIPTaken(err) || codes.Of(err) != "" {
					t.Fatalf("err = %v (code %q), want bare enroll.ErrIPTaken", err, codes.Of(err))
				}
			case tc.want != "":
				if got := codes.Of(err); got != tc.want {
					t.Fatalf("err = %v, code %q, want %q", err, got, tc.want)
				}
			default:
				if err != nil {
					t.Fatalf("admit: %v", err)
				}
				checkAdmitted(t, f, cmd)
				return
			}
			if after := stateBytes(t, f); !bytes.Equal(before, after) {
				t.Fatalf("a failed admit changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// checkAdmitted verifies the one entry's three effects and its audit event.
func checkAdmitted(t *testing.T, f *FSM, c Admit) {
	t.Helper()
	a := c.Admission
	rec, ok := f.Token(a.Token)
	if !ok || !rec.ConsumedAt.Equal(a.At) || rec.ConsumedBy != a.NodeID {
		t.Fatalf("token not consumed: %+v", rec)
	}
	n, ok := f.Node(a.NodeID)
	if !ok {
		t.Fatalf("node %s not recorded", a.NodeID)
	}
	ip := a.OverlayIP.Addr()
	if n.Name != rec.Name || n.Role != rec.Role || n.State != NodeActive || n.OverlayIP != ip ||
		n.Underlay != a.Underlay || !bytes.Equal(n.NebulaPublicKey, a.NebulaPub) || !n.Created.Equal(a.At) {
		t.Fatalf("node recorded as %+v", n)
	}
	if byName, ok := f.NodeByName(rec.Name); !ok || byName.ID != a.NodeID {
		t.Fatalf("NodeByName(%s) = %+v, %v", rec.Name, byName, ok)
	}
	if !f.IPAllocated(ip) {
		t.Fatalf("%v not allocated", ip)
	}
	audit := f.Audit()
	if last := audit[len(audit)-1]; last.Code != codes.EventNodeAdmitted || last.Subject != rec.Name || !last.At.Equal(a.At) {
		t.Fatalf("last audit event %+v", last)
	}
}

func TestAdmitSameTokenTwice(t *testing.T) {
	f := admitFixture(t)
	mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
	before := stateBytes(t, f)
	err := apply(t, f, admitCmd(1, "n-w1b", "w1", pki.RoleWorker, "10.42.0.3"))
	if got := codes.Of(err); got != codes.TokenConsumed {
		t.Fatalf("second admit: %v (code %q), want TokenConsumed", err, got)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("second admit changed the state")
	}
}

func TestAdmitRetryAfterIPTaken(t *testing.T) {
	f := admitFixture(t)
	err := apply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.9"))
	if !errors.Is(err, enroll.ErrIPTaken) {
		t.Fatalf("err = %v", err)
	}
	ip, err := f.FreeIP()
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, ip.String()))
}
