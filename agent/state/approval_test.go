package state

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// approvalFixture is a cluster with w14's token minted with --approve and
// one session (code "a") waiting on it.
func approvalFixture(t *testing.T) *FSM {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: approveRecord(14, "w14"), Actor: "uid:0"})
	mustApply(t, f, requestApprovalCmd(14, "a"))
	return f
}

// TestApproveJoinCommand: the waiting session's code approves it (the
// admission of that joiner's key then passes the FSM's check, another
// key's does not); before, the admission is refused.
func TestApproveJoinCommand(t *testing.T) {
	f := approvalFixture(t)
	if got := codes.Of(apply(t, f, joinCmd(14, "n-w14", "w14", pki.RoleWorker))); got != codes.ApprovalNotPending {
		t.Fatalf("admission before approval: code %q, want %q", got, codes.ApprovalNotPending)
	}
	mustApply(t, f, approveCmd(14, "a"))
	rec, _ := f.Token(secret(14).Hash())
	a := rec.Approval
	if !a.IsApproved() || a.ApprovedBy != "uid=0@origin" || a.Approved.Source != "192.0.2.9" || a.Wrong != 0 || len(a.Pending) != 0 {
		t.Fatalf("approval %+v", a)
	}
	if last := f.Audit()[len(f.Audit())-1]; last.Code != codes.EventJoinApproved || last.Subject != "w14" || last.Actor != "uid=0@origin" {
		t.Fatalf("last audit event %+v", last)
	}
	mustApply(t, f, approveCmd(14, "a")) // the same approval again: no-op
	if got := codes.Of(apply(t, f, approveCmd(14, "b"))); got != codes.ApprovalNotPending {
		t.Fatalf("another code after the approval: %q, want %q", got, codes.ApprovalNotPending)
	}
	// The approval is for the joiner's key: an admission for another key
	// (a seed that went astray) is refused.
	other := joinCmd(14, "n-w14", "w14", pki.RoleWorker)
	other.Admission.TLSPublicKey = []byte("a thief's key")
	if got := codes.Of(apply(t, f, other)); got != codes.ApprovalNotPending {
		t.Fatalf("admission for another key: code %q, want %q", got, codes.ApprovalNotPending)
	}
	mustApply(t, f, joinCmd(14, "n-w14", "w14", pki.RoleWorker))
}

// TestApprovalFiveWrongCodesBurn: four wrong codes are counted, the fifth
// burns the token (revoked too): the right code no longer approves, and
// no admission passes.
func TestApprovalFiveWrongCodesBurn(t *testing.T) {
	f := approvalFixture(t)
	for i := 1; i < enroll.ApprovalMaxWrong; i++ {
		mustApply(t, f, approveCmd(14, string(rune('b'+i))))
		rec, _ := f.Token(secret(14).Hash())
		if rec.Approval.Wrong != i || rec.Approval.IsBurnt() || rec.Revoked() || len(rec.Approval.Pending) != 1 {
			t.Fatalf("after %d wrong codes: %+v", i, rec)
		}
		if last := f.Audit()[len(f.Audit())-1]; last.Code != codes.EventApprovalWrong {
			t.Fatalf("wrong code %d audited as %+v", i, last)
		}
	}
	mustApply(t, f, approveCmd(14, "z"))
	rec, _ := f.Token(secret(14).Hash())
	if !rec.Approval.IsBurnt() || !rec.Revoked() || rec.Approval.Wrong != enroll.ApprovalMaxWrong || rec.Approval.IsApproved() {
		t.Fatalf("after %d wrong codes: %+v", enroll.ApprovalMaxWrong, rec)
	}
	if last := f.Audit()[len(f.Audit())-1]; last.Code != codes.ApprovalBurnt {
		t.Fatalf("burn audited as %+v", last)
	}
	before := stateBytes(t, f)
	for _, c := range []Command{approveCmd(14, "a"), requestApprovalCmd(14, "q")} {
		if got := codes.Of(apply(t, f, c)); got != codes.ApprovalBurnt {
			t.Fatalf("%T after the burn: code %q, want %q", c, got, codes.ApprovalBurnt)
		}
	}
	if got := codes.Of(apply(t, f, joinCmd(14, "n-w14", "w14", pki.RoleWorker))); got != codes.TokenRevoked {
		t.Fatalf("admission with a burnt token: code %q, want %q", got, codes.TokenRevoked)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a refused command changed the state")
	}
}

// TestRequestApproval: sessions wait side by side (a code approves only
// its own), at most enroll.ApprovalMaxPending, the oldest pushed out; a
// token without --approve, an expired one, or no waiting join are
// refused with their codes and change nothing.
func TestRequestApproval(t *testing.T) {
	f := approvalFixture(t)
	mustApply(t, f, requestApprovalCmd(14, "a")) // again: no change
	for _, c := range []string{"b", "c", "d", "e"} {
		mustApply(t, f, requestApprovalCmd(14, c))
	}
	rec, _ := f.Token(secret(14).Hash())
	if n := len(rec.Approval.Pending); n != enroll.ApprovalMaxPending ||
		rec.Approval.Pending[0].Code != enroll.HashCode(secret(14).Hash(), "b") {
		t.Fatalf("pending %+v, want b..e", rec.Approval.Pending)
	}
	mustApply(t, f, approveCmd(14, "a")) // pushed out: wrong
	if rec, _ := f.Token(secret(14).Hash()); rec.Approval.Wrong != 1 || rec.Approval.IsApproved() {
		t.Fatalf("a pushed-out session's code approved: %+v", rec.Approval)
	}
	mustApply(t, f, approveCmd(14, "c"))
	if rec, _ := f.Token(secret(14).Hash()); rec.Approval.Approved.Code != enroll.HashCode(secret(14).Hash(), "c") {
		t.Fatalf("approved %+v, want session c", rec.Approval)
	}

	f = bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(t, f, MintToken{Record: approveRecord(2, "w2")})
	before := stateBytes(t, f)
	late := requestApprovalCmd(2, "a")
	late.At = t0.Add(enroll.DefaultTTL)
	lateApprove := approveCmd(2, "a")
	lateApprove.At = t0.Add(enroll.DefaultTTL)
	for _, tt := range []struct {
		cmd  Command
		want codes.Code
	}{
		{requestApprovalCmd(1, "a"), codes.ApprovalNotPending},
		{approveCmd(1, "a"), codes.ApprovalNotPending},
		{approveCmd(2, "a"), codes.ApprovalNotPending},
		{late, codes.TokenExpired},
		{lateApprove, codes.TokenExpired},
		{requestApprovalCmd(9, "a"), codes.TokenUnknown},
	} {
		if got := codes.Of(apply(t, f, tt.cmd)); got != tt.want {
			t.Errorf("%T %+v: code %q, want %q", tt.cmd, tt.cmd, got, tt.want)
		}
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a refused command changed the state")
	}
	// A minted record cannot carry an approval state.
	bad := approveRecord(3, "w3")
	bad.Approval.Wrong = 1
	if got := codes.Of(apply(t, f, MintToken{Record: bad})); got != codes.BadRequest {
		t.Fatalf("mint with an approval state: %q", got)
	}
}

// TestApprovalTooManySessionsBurn: the session past
// enroll.ApprovalMaxSessions burns the token (revoked, audited); nothing
// is approved with it afterwards.
func TestApprovalTooManySessionsBurn(t *testing.T) {
	f := approvalFixture(t) // session "a" waits: 1
	for i := 2; i <= enroll.ApprovalMaxSessions; i++ {
		mustApply(t, f, requestApprovalCmd(14, fmt.Sprintf("s%d", i)))
	}
	if rec, _ := f.Token(secret(14).Hash()); rec.Approval.IsBurnt() || rec.Approval.Sessions != enroll.ApprovalMaxSessions {
		t.Fatalf("after %d sessions: %+v", enroll.ApprovalMaxSessions, rec.Approval)
	}
	mustApply(t, f, requestApprovalCmd(14, "one more"))
	rec, _ := f.Token(secret(14).Hash())
	if !rec.Approval.IsBurnt() || !rec.Revoked() || len(rec.Approval.Pending) != 0 {
		t.Fatalf("after %d sessions: %+v", enroll.ApprovalMaxSessions+1, rec)
	}
	if last := f.Audit()[len(f.Audit())-1]; last.Code != codes.ApprovalBurnt {
		t.Fatalf("the burn audited as %+v", last)
	}
	if got := codes.Of(apply(t, f, approveCmd(14, "s16"))); got != codes.ApprovalBurnt {
		t.Fatalf("approve after the burn: %q, want %q", got, codes.ApprovalBurnt)
	}
}
