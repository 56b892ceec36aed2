package state

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// abortAt is when the joiner undoes its join in these tests.
var abortAt = t0.Add(4 * time.Minute)

// abortOf is the joiner's own AbortJoin of the certified node id: the
// leaf certsCmd recorded for it.
func abortOf(id string) AbortJoin {
	return AbortJoin{NodeID: id, Leaf: "aa-" + id, Cause: "start overlay: ports.nebula", At: abortAt, Actor: "node:" + id}
}

// wantAbortRevoked fails unless every certificate recorded for id's
// attempt (the fingerprints fps) is in the revocation list.
func wantAbortRevoked(t *testing.T, f *FSM, id string, fps ...string) {
	t.Helper()
	got := revokedFPs(f, id)
	for _, fp := range fps {
		if !slices.Contains(got, fp) {
			t.Fatalf("revocations of %s %v: %s missing", id, got, fp)
		}
	}
}

// wantOwed fails unless a gossip key rotation is owed for id.
func wantOwed(t *testing.T, f *FSM, id string) {
	t.Helper()
	c, _ := f.Cluster()
	if !slices.Contains(c.KeysDebt(), id) {
		t.Fatalf("no key rotation owed for %s (%v): it had the gossip keys", id, c.KeysDebt())
	}
}

// TestAbortJoin: the joiner undoes its own certified, unconfirmed join.
// Both certificates signed for it are revoked, a key rotation is owed,
// the record is deleted and its IP freed, the token is unused again and
// admits again; the audit says so.
func TestAbortJoin(t *testing.T) {
	f := lifeFixture(t, "certified")
	n, _ := f.Node("n-w1")
	mustApply(t, f, abortOf("n-w1"))
	if _, ok := f.Node("n-w1"); ok {
		t.Fatal("the undone join's record is still there")
	}
	if f.IPAllocated(n.OverlayIP) {
		t.Fatalf("%v still allocated", n.OverlayIP)
	}
	wantAbortRevoked(t, f, "n-w1", "aa-n-w1", "bb-n-w1")
	wantOwed(t, f, "n-w1")
	if rec, _ := f.Token(secret(1).Hash()); rec.Consumed() {
		t.Fatalf("token after the abort: %+v, want unused", rec)
	}
	if last := f.Audit()[len(f.Audit())-1]; last.Code != codes.EventJoinAborted || last.Subject != "w1" || last.Actor != "node:n-w1" {
		t.Fatalf("last audit event %+v", last)
	}
	// The same token admits again, and the new attempt's certificates are
	// not among the revoked ones.
	mustApply(t, f, joinCmd(1, "n-w1b", "w1", pki.RoleWorker))
	rc := certsCmd("n-w1b")
	rc.Joining = true
	mustApply(t, f, rc)
	mustApply(t, f, ConfirmJoin{NodeID: "n-w1b", At: abortAt.Add(time.Minute)})
	for _, r := range f.Revocations() {
		if r.Fingerprint == "aa-n-w1b" || r.Fingerprint == "bb-n-w1b" {
			t.Fatalf("the second attempt's certificate %s is revoked", r.Fingerprint)
		}
	}
}

// TestAbortJoinRefusals: only a joining record with certificates, only
// by the joiner's own leaf; an active record can never be undone, nor a
// failed or former one. A refusal changes nothing.
func TestAbortJoinRefusals(t *testing.T) {
	other := abortOf("n-w1")
	other.Leaf = "aa01" // the origin's leaf
	noLeaf := abortOf("n-w1")
	noLeaf.Leaf = ""
	noTime := abortOf("n-w1")
	noTime.At = time.Time{}
	long := abortOf("n-w1")
	long.Cause = string(bytes.Repeat([]byte("x"), maxAbortCause+1))
	unknown := abortOf("n-w1")
	unknown.NodeID = "n-nobody"
	for _, tc := range []struct {
		name, from string
		cmd        AbortJoin
		want       codes.Code
	}{
		{"fail/active", "active", abortOf("n-w1"), codes.JoinConfirmed},
		{"fail/failed", "failed", abortOf("n-w1"), codes.BadRequest},
		{"fail/left", "left", abortOf("n-w1"), codes.BadRequest},
		{"fail/removed", "removed", abortOf("n-w1"), codes.BadRequest},
		{"fail/no-certificates", "joining", abortOf("n-w1"), codes.BadRequest},
		{"fail/another-leaf", "certified", other, codes.NotMember},
		{"fail/no-leaf", "certified", noLeaf, codes.NotMember},
		{"fail/no-time", "certified", noTime, codes.BadRequest},
		{"fail/cause-too-long", "certified", long, codes.BadRequest},
		{"fail/unknown", "certified", unknown, codes.NodeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := lifeFixture(t, tc.from)
			before := stateBytes(t, f)
			if err := apply(t, f, tc.cmd); codes.Of(err) != tc.want {
				t.Fatalf("err = %v (%s), want %s", err, codes.Of(err), tc.want)
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("a refused abort changed the state")
			}
		})
	}
	// The origin, active, by its own leaf.
	f := lifeFixture(t, "certified")
	before := stateBytes(t, f)
	if err := apply(t, f, AbortJoin{NodeID: originID, Leaf: "aa01", At: abortAt}); codes.Of(err) != codes.JoinConfirmed {
		t.Fatalf("abort of the active origin: %v, want %s", err, codes.JoinConfirmed)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a refused abort changed the state")
	}
}

// TestAbortJoinReusedRecord: undoing a join that reused a former node's
// record puts that node back as it was (state, id and overlay IP kept,
// still allocated), revokes the certificates of the undone attempt
// besides the former node's, and frees only the reusing token.
func TestAbortJoinReusedRecord(t *testing.T) {
	for _, st := range []string{"left", "removed", "failed"} {
		t.Run(st, func(t *testing.T) {
			f := lifeFixture(t, st)
			old, _ := f.Node("n-w1")
			mustApply(t, f, MintToken{Record: tokenRecord(2, "w1", pki.RoleWorker)})
			again := joinCmd(2, "n-w1", "w1", pki.RoleWorker)
			again.Admission.TLSPublicKey = []byte("new-tls-key")
			mustApply(t, f, again)
			rc := certsCmd("n-w1")
			rc.TLSFingerprint, rc.NebulaFingerprint, rc.Joining = "aa-2", "bb-2", true
			mustApply(t, f, rc)
			a := abortOf("n-w1")
			a.Leaf = "aa-2"
			mustApply(t, f, a)
			n, ok := f.Node("n-w1")
			if !ok || n.State != NodeState(st) || n.Prior != "" || n.OverlayIP != old.OverlayIP || !f.IPAllocated(n.OverlayIP) {
				t.Fatalf("after the abort w1 is %+v (%t), want %s with its IP", n, ok, st)
			}
			if n.TLSFingerprint != "" || n.NebulaFingerprint != "" || len(n.TLSCert) > 0 || len(n.TLSPublicKey) > 0 ||
				n.Token != (enroll.TokenHash{}) {
				t.Fatalf("the restored record keeps the undone attempt's certificates or keys: %+v", n)
			}
			wantAbortRevoked(t, f, "n-w1", "aa-n-w1", "bb-n-w1", "aa-2", "bb-2")
			if rec, _ := f.Token(secret(2).Hash()); rec.Consumed() {
				t.Fatal("the reusing admission's token is still consumed")
			}
			if rec, _ := f.Token(secret(1).Hash()); !rec.Consumed() {
				t.Fatal("the first admission's token was freed too")
			}
		})
	}
}

// TestAbortJoinGivesBackKeyAndJWT: a reusable key gets its use back, a
// JWT its jti (the same JWT admits again), and both attempts'
// certificates are revoked.
func TestAbortJoinGivesBackKeyAndJWT(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: keyRecord(43, 1, "w-"), Actor: "uid:0"})
	kc := keyJoinCmd(43, "a", "")
	mustApply(t, f, kc)
	id := kc.Admission.NodeID
	mustApply(t, f, joiningCertsCmd(id))
	mustApply(t, f, abortOf(id))
	if rec, _ := f.Token(secret(43).Hash()); rec.Key.Used != 0 {
		t.Fatalf("key used %d after the abort, want 0", rec.Key.Used)
	}
	wantAbortRevoked(t, f, id, "aa-"+id, "bb-"+id)
	mustApply(t, f, keyJoinCmd(43, "b", "")) // the one use is there again

	jc := identityJoinCmd(t, testIdentity("run-1"), "a")
	mustApply(t, f, jc)
	jid := jc.Admission.NodeID
	mustApply(t, f, joiningCertsCmd(jid))
	mustApply(t, f, abortOf(jid))
	wantAbortRevoked(t, f, jid, "aa-"+jid, "bb-"+jid)
	mustApply(t, f, identityJoinCmd(t, testIdentity("run-1"), "b")) // the jti is free again
}

// TestAbortJoinNeedsApprovalAgain: a token minted with --approve whose
// approved join is undone is unused and waits for a fresh approval (the
// one given was for keys whose certificates are now revoked); its count
// of wrong codes stays.
func TestAbortJoinNeedsApprovalAgain(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: approveRecord(14, "w14"), Actor: "uid:0"})
	mustApply(t, f, requestApprovalCmd(14, "a"))
	mustApply(t, f, approveCmd(14, "b")) // wrong
	mustApply(t, f, approveCmd(14, "a"))
	mustApply(t, f, joinCmd(14, "n-w14", "w14", pki.RoleWorker))
	mustApply(t, f, joiningCertsCmd("n-w14"))
	mustApply(t, f, abortOf("n-w14"))
	rec, _ := f.Token(secret(14).Hash())
	if rec.Consumed() || rec.Approval.IsApproved() || len(rec.Approval.Pending) != 0 || rec.Approval.Wrong != 1 {
		t.Fatalf("token after the abort: consumed %t, approval %+v", rec.Consumed(), rec.Approval)
	}
	if err := apply(t, f, joinCmd(14, "n-w14", "w14", pki.RoleWorker)); codes.Of(err) != codes.ApprovalNotPending {
		t.Fatalf("admission without a new approval: %v, want %s", err, codes.ApprovalNotPending)
	}
	mustApply(t, f, requestApprovalCmd(14, "c"))
	mustApply(t, f, approveCmd(14, "c"))
	mustApply(t, f, joinCmd(14, "n-w14", "w14", pki.RoleWorker))
}

// TestAbortJoinUndoLimit: a one-time token and a JWT give back MaxUndone
// failed joins, a key as many as its uses (when more); the next undo is
// refused with JoinUndoLimit and changes nothing, so the join bound fails
// that join (its token stays used): a token's holder cannot grow the
// revocation list and owe key rotations for as long as the token lives.
func TestAbortJoinUndoLimit(t *testing.T) {
	cycle := func(t *testing.T, f *FSM, admit Admit, i int) error {
		t.Helper()
		admit.Admission.At = t0.Add(time.Duration(i) * time.Minute)
		mustApply(t, f, admit)
		id := admit.Admission.NodeID
		mustApply(t, f, joiningCertsCmd(id))
		return apply(t, f, abortOf(id))
	}
	refusedLast := func(t *testing.T, f *FSM, admit Admit, limit int) {
		t.Helper()
		for i := range limit {
			if err := cycle(t, f, admit, i+1); err != nil {
				t.Fatalf("undo %d of %d: %v", i+1, limit, err)
			}
		}
		admit.Admission.At = t0.Add(time.Duration(limit+1) * time.Minute)
		mustApply(t, f, admit)
		id := admit.Admission.NodeID
		mustApply(t, f, joiningCertsCmd(id))
		before := stateBytes(t, f)
		if err := apply(t, f, abortOf(id)); codes.Of(err) != codes.JoinUndoLimit {
			t.Fatalf("undo %d: %v, want %s", limit+1, err, codes.JoinUndoLimit)
		}
		if !bytes.Equal(before, stateBytes(t, f)) {
			t.Fatal("a refused undo changed the state")
		}
	}
	t.Run("one-time-token", func(t *testing.T) {
		f := bootstrapped(t)
		mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
		refusedLast(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker), MaxUndone)
		if rec, _ := f.Token(secret(1).Hash()); !rec.Consumed() || rec.Undone != MaxUndone {
			t.Fatalf("token after the refused undo: consumed %t, undone %d", rec.Consumed(), rec.Undone)
		}
	})
	t.Run("key-of-five-uses", func(t *testing.T) {
		f := bootstrapped(t)
		mustApply(t, f, MintToken{Record: keyRecord(43, 5, "w-"), Actor: "uid:0"})
		refusedLast(t, f, keyJoinCmd(43, "a", ""), 5)
	})
	t.Run("jwt", func(t *testing.T) {
		f := bootstrapped(t)
		refusedLast(t, f, identityJoinCmd(t, testIdentity("run-1"), "a"), MaxUndone)
	})
}
