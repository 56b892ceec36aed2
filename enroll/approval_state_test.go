package enroll_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/enroll"
)

func pendingJoin(code string) enroll.PendingJoin {
	var h enroll.TokenHash
	return enroll.PendingJoin{Code: enroll.HashCode(h, code), Source: "192.0.2.1", Via: "c1", Since: time.Unix(1, 0), Key: "k-" + code}
}

// TestApprovalWithPending: sessions wait side by side, at most
// ApprovalMaxPending, the oldest pushed out; a waiting session or a
// decided approval changes nothing; the session past ApprovalMaxSessions
// burns the token; the receiver is never modified.
func TestApprovalWithPending(t *testing.T) {
	at := time.Unix(100, 0)
	var a enroll.Approval
	for i := range enroll.ApprovalMaxPending + 1 {
		before := fmt.Sprint(a)
		next, ok := a.WithPending(pendingJoin(fmt.Sprint(i)), at)
		if !ok || fmt.Sprint(a) != before {
			t.Fatalf("session %d: ok %v, receiver changed %v", i, ok, fmt.Sprint(a) != before)
		}
		a = next
		if a.Sessions != i+1 {
			t.Fatalf("session %d: Sessions %d", i, a.Sessions)
		}
	}
	if len(a.Pending) != enroll.ApprovalMaxPending || a.Pending[0].Code != pendingJoin("1").Code ||
		a.Pending[enroll.ApprovalMaxPending-1].Code != pendingJoin(fmt.Sprint(enroll.ApprovalMaxPending)).Code {
		t.Fatalf("pending %+v, want sessions 1..%d", a.Pending, enroll.ApprovalMaxPending)
	}
	if _, ok := a.WithPending(pendingJoin("2"), at); ok {
		t.Fatal("a waiting session recorded again")
	}
	if !a.Waits(pendingJoin("2").Code) || a.Waits(pendingJoin("0").Code) {
		t.Fatal("Waits: pushed-out session waits, or a waiting one does not")
	}
	for a.Sessions < enroll.ApprovalMaxSessions {
		a, _ = a.WithPending(pendingJoin(fmt.Sprintf("s%d", a.Sessions)), at)
		if a.IsBurnt() {
			t.Fatalf("burnt after %d sessions", a.Sessions)
		}
	}
	a, ok := a.WithPending(pendingJoin("last"), at)
	if !ok || !a.IsBurnt() || !a.BurntAt.Equal(at) || len(a.Pending) != 0 || !strings.Contains(a.BurntWhy(), "joins waited") {
		t.Fatalf("session %d: %+v (%s)", enroll.ApprovalMaxSessions+1, a, a.BurntWhy())
	}
	if _, ok := a.WithPending(pendingJoin("after"), at); ok {
		t.Fatal("a burnt token took a session")
	}
	approved, _ := (enroll.Approval{}).WithPending(pendingJoin("x"), at)
	approved, _ = approved.Try(pendingJoin("x").Code, "op", at)
	if _, ok := approved.WithPending(pendingJoin("y"), at); ok {
		t.Fatal("an approved token took a session")
	}
}

// TestApprovalTry: the code of a waiting session approves it (the others
// dropped); any other counts as wrong, the ApprovalMaxWrong-th burns;
// the receiver is never modified.
func TestApprovalTry(t *testing.T) {
	at := time.Unix(100, 0)
	a, _ := (enroll.Approval{}).WithPending(pendingJoin("a"), at)
	a, _ = a.WithPending(pendingJoin("b"), at)
	before := fmt.Sprint(a)
	ok, out := a.Try(pendingJoin("b").Code, "uid=0@c1", at)
	if out != enroll.AttemptApproved || !ok.IsApproved() || ok.Approved.Key != "k-b" || ok.ApprovedBy != "uid=0@c1" ||
		len(ok.Pending) != 0 || fmt.Sprint(a) != before {
		t.Fatalf("right code: %v %+v (receiver changed %v)", out, ok, fmt.Sprint(a) != before)
	}
	for i := 1; i <= enroll.ApprovalMaxWrong; i++ {
		before := fmt.Sprint(a)
		var out enroll.Attempt
		a, out = a.Try(pendingJoin("wrong").Code, "op", at)
		want := enroll.AttemptWrong
		if i == enroll.ApprovalMaxWrong {
			want = enroll.AttemptBurnt
		}
		if out != want || a.Wrong != i || a.IsBurnt() != (i == enroll.ApprovalMaxWrong) {
			t.Fatalf("wrong code %d: %v %+v", i, out, a)
		}
		if fmt.Sprint(a) == before {
			t.Fatalf("wrong code %d changed nothing", i)
		}
	}
	if len(a.Pending) != 0 || !strings.Contains(a.BurntWhy(), fmt.Sprintf("%d wrong approval codes", enroll.ApprovalMaxWrong)) {
		t.Fatalf("burnt: %+v (%s)", a, a.BurntWhy())
	}
	// Burnt by wrong codes after as many sessions as allowed: the codes
	// are the reason.
	var full enroll.Approval
	for full.Sessions < enroll.ApprovalMaxSessions {
		full, _ = full.WithPending(pendingJoin(fmt.Sprint(full.Sessions)), at)
	}
	for !full.IsBurnt() {
		full, _ = full.Try(pendingJoin("wrong").Code, "op", at)
	}
	if why := full.BurntWhy(); !strings.Contains(why, "wrong approval codes") {
		t.Fatalf("burnt by wrong codes after %d sessions: %q", full.Sessions, why)
	}
}

// TestApprovalPollConfig: a zero ApprovalPoll is the default, a given one
// is kept.
func TestApprovalPollConfig(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{0: enroll.DefaultApprovalPoll, 50 * time.Millisecond: 50 * time.Millisecond} {
		cfg := enroll.DefaultServerConfig()
		cfg.ApprovalPoll = in
		if got := enroll.NewServer(cfg, nil, nil, enroll.Deps{}).ApprovalPoll(); got != want {
			t.Errorf("ApprovalPoll %s: server holds %s, want %s", in, got, want)
		}
	}
}
