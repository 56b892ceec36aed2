package state

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// lifeFixture is a cluster with w1 in the given state: "joining" (no
// certificates), "certified" (joining, certificates recorded), "active",
// "left", "removed" or "failed" (certified, then failed).
func lifeFixture(t *testing.T, st string) *FSM {
	t.Helper()
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
	if st == "joining" {
		return f
	}
	rc := certsCmd("n-w1")
	rc.Joining = true
	mustApply(t, f, rc)
	at := t0.Add(3 * time.Minute)
	switch st {
	case "certified":
	case "failed":
		mustApply(t, f, FailJoin{NodeID: "n-w1", Cause: "never confirmed", At: at})
	default:
		mustApply(t, f, ConfirmJoin{NodeID: "n-w1", At: at})
		if st != "active" {
			mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeState(st), At: at})
		}
	}
	return f
}

func revokedFPs(f *FSM, id string) []string {
	var out []string
	for _, r := range f.Revocations() {
		if r.NodeID == id {
			out = append(out, r.Fingerprint)
		}
	}
	return out
}

// TestLifecycleTransitions: every transition of issue 11, the allowed
// ones and the refused ones; a refused one changes nothing.
func TestLifecycleTransitions(t *testing.T) {
	at := t0.Add(5 * time.Minute)
	for _, tc := range []struct {
		name, from string
		cmd        Command
		want       codes.Code // "" means success
		after      NodeState  // w1's state after a success
		revoked    int        // w1's revocations after it
	}{
		{name: "ok/confirm-certified", from: "certified", cmd: ConfirmJoin{NodeID: "n-w1", At: at}, after: NodeActive},
		{name: "ok/confirm-active-again", from: "active", cmd: ConfirmJoin{NodeID: "n-w1", At: at}, after: NodeActive},
		{name: "fail/confirm-without-certs", from: "joining", cmd: ConfirmJoin{NodeID: "n-w1", At: at}, want: codes.BadRequest},
		{name: "fail/confirm-failed", from: "failed", cmd: ConfirmJoin{NodeID: "n-w1", At: at}, want: codes.JoinUnconfirmed},
		{name: "fail/confirm-left", from: "left", cmd: ConfirmJoin{NodeID: "n-w1", At: at}, want: codes.BadRequest},
		{name: "fail/confirm-removed", from: "removed", cmd: ConfirmJoin{NodeID: "n-w1", At: at}, want: codes.BadRequest},
		{name: "fail/confirm-unknown", from: "certified", cmd: ConfirmJoin{NodeID: "n-x", At: at}, want: codes.NodeUnknown},
		{name: "ok/fail-certified", from: "certified", cmd: FailJoin{NodeID: "n-w1", Cause: "c", At: at}, after: NodeFailed, revoked: 2},
		{name: "ok/fail-uncertified", from: "joining", cmd: FailJoin{NodeID: "n-w1", Cause: "c", At: at}, after: NodeFailed},
		{name: "fail/fail-active", from: "active", cmd: FailJoin{NodeID: "n-w1", Cause: "c", At: at}, want: codes.BadRequest},
		{name: "fail/fail-failed", from: "failed", cmd: FailJoin{NodeID: "n-w1", Cause: "c", At: at}, want: codes.BadRequest},
		{name: "fail/fail-no-cause", from: "certified", cmd: FailJoin{NodeID: "n-w1", At: at}, want: codes.BadRequest},
		{name: "fail/fail-unknown", from: "certified", cmd: FailJoin{NodeID: "n-x", Cause: "c", At: at}, want: codes.NodeUnknown},
		{name: "fail/set-active-joining", from: "certified", cmd: SetNodeState{NodeID: "n-w1", State: NodeActive, At: at}, want: codes.BadRequest},
		{name: "fail/set-active-failed", from: "failed", cmd: SetNodeState{NodeID: "n-w1", State: NodeActive, At: at}, want: codes.BadRequest},
		{name: "fail/set-left-failed", from: "failed", cmd: SetNodeState{NodeID: "n-w1", State: NodeLeft, At: at}, want: codes.BadRequest},
		{name: "fail/set-failed", from: "certified", cmd: SetNodeState{NodeID: "n-w1", State: NodeFailed, At: at}, want: codes.BadRequest},
		{name: "ok/remove-failed-revokes-once", from: "failed", cmd: SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: at}, after: NodeRemoved, revoked: 2},
		{name: "ok/remove-certified", from: "certified", cmd: SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: at}, after: NodeRemoved, revoked: 2},
		{name: "ok/left-active", from: "active", cmd: SetNodeState{NodeID: "n-w1", State: NodeLeft, At: at}, after: NodeLeft, revoked: 2},
		{name: "fail/abort-certified", from: "certified", cmd: AbortAdmission{NodeID: "n-w1", At: at}, want: codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := lifeFixture(t, tc.from)
			before := stateBytes(t, f)
			err := apply(t, f, tc.cmd)
			if tc.want != "" {
				if codes.Of(err) != tc.want {
					t.Fatalf("err = %v (%s), want %s", err, codes.Of(err), tc.want)
				}
				if string(stateBytes(t, f)) != string(before) {
					t.Fatal("a refused command changed the state")
				}
				return
			}
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			n, _ := f.Node("n-w1")
			if n.State != tc.after {
				t.Fatalf("w1 is %s, want %s", n.State, tc.after)
			}
			if got := revokedFPs(f, "n-w1"); len(got) != tc.revoked {
				t.Fatalf("w1 revocations %v, want %d", got, tc.revoked)
			}
			if rec, _ := f.Token(secret(1).Hash()); !rec.Consumed() {
				t.Fatal("w1's token is unused again")
			}
		})
	}
}

// TestRecordCertsKeepsJoining: RecordCerts written since issue 11 leaves
// the node joining; an entry without Joining (an older log) makes it
// active, as it did when it was written.
func TestRecordCertsKeepsJoining(t *testing.T) {
	for _, joining := range []bool{true, false} {
		f := lifeFixture(t, "joining")
		rc := certsCmd("n-w1")
		rc.Joining = joining
		mustApply(t, f, rc)
		n, _ := f.Node("n-w1")
		want := NodeActive
		if joining {
			want = NodeJoining
		}
		if n.State != want || n.TLSFingerprint != "aa-n-w1" {
			t.Fatalf("Joining=%t: w1 is %s with TLS %q, want %s with aa-n-w1", joining, n.State, n.TLSFingerprint, want)
		}
	}
}

// TestFormerNodesFreeTheirName: a left, removed or failed node holds no
// name (NodeByName), FormerNode finds it, and the next admission of the
// name that names its id reuses the record: same id and overlay IP, new
// keys, joining, every old certificate revoked and none still listed.
func TestFormerNodesFreeTheirName(t *testing.T) {
	for _, st := range []string{"left", "removed", "failed"} {
		t.Run(st, func(t *testing.T) {
			f := lifeFixture(t, st)
			old, _ := f.Node("n-w1")
			if _, ok := f.NodeByName("w1"); ok {
				t.Fatal("a former node still holds its name")
			}
			if n, ok := f.FormerNode("w1"); !ok || n.ID != "n-w1" {
				t.Fatalf("FormerNode(w1) = %s, %t", n.ID, ok)
			}
			mustApply(t, f, MintToken{Record: tokenRecord(2, "w1", pki.RoleWorker)})
			again := joinCmd(2, "n-w1", "w1", pki.RoleWorker)
			again.Admission.TLSPublicKey = []byte("new-tls-key")
			again.Admission.At = t0.Add(6 * time.Minute)
			mustApply(t, f, again)
			n, _ := f.Node("n-w1")
			if n.State != NodeJoining || n.OverlayIP != old.OverlayIP || n.Prior != NodeState(st) ||
				string(n.TLSPublicKey) != "new-tls-key" || n.TLSFingerprint != "" || n.NebulaFingerprint != "" ||
				len(n.Retired) != 0 || n.Cause != "" || n.Token != secret(2).Hash() {
				t.Fatalf("reused record %+v", n)
			}
			if got := revokedFPs(f, "n-w1"); !slices.Contains(got, "aa-n-w1") || !slices.Contains(got, "bb-n-w1") || len(got) != 2 {
				t.Fatalf("revocations after reuse %v, want the two old fingerprints once each", got)
			}
			if len(f.Nodes()) != 2 {
				t.Fatalf("%d records, want the origin and w1 only", len(f.Nodes()))
			}
			// Then it joins and confirms as before.
			rc := certsCmd("n-w1")
			rc.TLSFingerprint, rc.NebulaFingerprint, rc.Joining = "aa-2", "bb-2", true
			mustApply(t, f, rc)
			mustApply(t, f, ConfirmJoin{NodeID: "n-w1", At: t0.Add(7 * time.Minute)})
			if n, _ := f.Node("n-w1"); n.State != NodeActive || n.Prior != "" {
				t.Fatalf("after the rejoin w1 is %s (prior %q)", n.State, n.Prior)
			}
		})
	}
}

// TestReuseAbort: aborting the admission that reused a record puts the
// former node back (state, IP kept) and frees only the new token.
func TestReuseAbort(t *testing.T) {
	f := lifeFixture(t, "left")
	mustApply(t, f, MintToken{Record: tokenRecord(2, "w1", pki.RoleWorker)})
	mustApply(t, f, joinCmd(2, "n-w1", "w1", pki.RoleWorker))
	mustApply(t, f, AbortAdmission{NodeID: "n-w1", At: t0.Add(6 * time.Minute)})
	n, ok := f.Node("n-w1")
	if !ok || n.State != NodeLeft || !f.IPAllocated(n.OverlayIP) || n.Prior != "" {
		t.Fatalf("after the abort w1 is %+v (%t), want left with its IP", n, ok)
	}
	if rec, _ := f.Token(secret(2).Hash()); rec.Consumed() {
		t.Fatal("the reusing admission's token is still consumed")
	}
	if rec, _ := f.Token(secret(1).Hash()); !rec.Consumed() {
		t.Fatal("the first admission's token was freed too")
	}
}

// TestReuseRefusals: an id held by a node that is not former, or a
// reuse that names another overlay IP, is refused and changes nothing;
// a new id for a former node's name is a fresh record.
func TestReuseRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, from string
		edit       func(*Admit)
		want       codes.Code
	}{
		{name: "fail/id-of-active", from: "active", want: codes.BadRequest},
		{name: "fail/id-of-joining", from: "certified", want: codes.BadRequest},
		{name: "fail/other-ip", from: "left", want: codes.BadRequest,
			edit: func(a *Admit) { a.Admission.OverlayIP = netip.MustParsePrefix("10.42.0.77/16") }},
		{name: "fail/id-under-other-name", from: "left", want: codes.BadRequest,
			edit: func(a *Admit) { a.Admission.Name, a.Node.Name = "w2", "w2" }},
		{name: "ok/new-id-for-former-name", from: "left",
			edit: func(a *Admit) { a.Admission.NodeID, a.Node.ID = "n-new", "n-new" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := lifeFixture(t, tc.from)
			mustApply(t, f, MintToken{Record: tokenRecord(2, "w1", pki.RoleWorker)})
			mustApply(t, f, MintToken{Record: tokenRecord(3, "w2", pki.RoleWorker)})
			cmd := joinCmd(2, "n-w1", "w1", pki.RoleWorker)
			if tc.edit != nil {
				tc.edit(&cmd)
			}
			if cmd.Admission.Name == "w2" {
				cmd.Admission.Token = secret(3).Hash()
			}
			before := stateBytes(t, f)
			err := apply(t, f, cmd)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if n, ok := f.Node("n-new"); !ok || n.State != NodeJoining || n.Prior != "" {
					t.Fatalf("new record %+v", n)
				}
				return
			}
			if codes.Of(err) != tc.want {
				t.Fatalf("err = %v (%s), want %s", err, codes.Of(err), tc.want)
			}
			if string(stateBytes(t, f)) != string(before) {
				t.Fatal("a refused admission changed the state")
			}
		})
	}
}
