package agenttest_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// approvalJoin starts a join of n with tok that waits for approval; the
// code it shows arrives on shown, the join's outcome on done.
func approvalJoin(t *testing.T, n *agenttest.Node, tok string) (shown chan apitype.JoinApproval, done chan error) {
	shown, done = make(chan apitype.JoinApproval, 4), make(chan error, 1)
	go func() {
		_, err := n.Client.Join(t.Context(), apitype.JoinRequest{Token: tok}, func(l apitype.JoinLine) {
			if l.Approval != nil {
				shown <- *l.Approval
			}
		})
		done <- err
	}()
	return shown, done
}

func waitShown(t *testing.T, shown chan apitype.JoinApproval, done chan error) apitype.JoinApproval {
	t.Helper()
	select {
	case a := <-shown:
		return a
	case err := <-done:
		t.Fatalf("the join ended before it showed a code: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no approval code within 20s")
	}
	return apitype.JoinApproval{}
}

func waitDone(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the join did not end within 30s")
	}
	return nil
}

// wrongCode is a 6-digit code other than code.
func wrongCode(code string, i int) string {
	c := fmt.Sprintf("%06d", i)
	if c == code {
		c = "999999"
	}
	return c
}

// TestApproveJoin: a token minted with --approve holds its join until an
// operator approves the code the joiner shows, on any control node (here
// the other one: the write is forwarded). A wrong code is counted and
// refused with ApprovalWrongCode; five burn the token (ApprovalBurnt) and
// end its join with that code, nothing recorded; no approval before the
// token expires ends the join with ApprovalTimeout. `meshctl tokens`
// shows what waits, and the audit trail names the approving operator.
func TestApproveJoin(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	c2 := agenttest.NewNode(t, "c2", clock)
	origin.Init(t, "alpha")
	if _, err := c2.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tokenOf := func(n *agenttest.Node, name string) apitype.Token {
		t.Helper()
		toks, err := n.Client.Tokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(toks) - 1; i >= 0; i-- {
			if toks[i].Name == name {
				return toks[i]
			}
		}
		t.Fatalf("no token for %s in %+v", name, toks)
		return apitype.Token{}
	}

	t.Run("approved", func(t *testing.T) {
		w1 := agenttest.NewNode(t, "w1", clock)
		if _, err := c2.Client.Approve(ctx, apitype.ApproveRequest{Name: "w1", Code: "123456"}); codes.Of(err) != codes.ApprovalNotPending {
			t.Fatalf("approve before any join waits: %v, want %s", err, codes.ApprovalNotPending)
		}
		tok := origin.Admit(t, apitype.AdmitRequest{Name: "w1", Approve: true})
		// join --plan says the join will wait, and spends nothing.
		if c := wantCheck(t, plan(t, w1, tok), "admission", apitype.CheckOK, ""); !strings.Contains(c.Detail, "wait for an operator's approval") {
			t.Fatalf("plan's admission check does not say the join will wait: %s", c.Detail)
		}
		shown, done := approvalJoin(t, w1, tok)
		a := waitShown(t, shown, done)
		if a.Name != "w1" || len(a.Code) != 6 {
			t.Fatalf("shown %+v", a)
		}
		row := tokenOf(c2, "w1")
		if row.Approval == nil || row.Approval.State != apitype.ApprovalStateWaiting || len(row.Approval.Waiting) != 1 ||
			row.Approval.Waiting[0].Source != w1.IP {
			t.Fatalf("token row while the join waits: %+v %+v", row, row.Approval)
		}
		// c2's own FSM, which may apply the waiting entry a moment after
		// the seed that wrote it.
		agenttest.WaitFor(t, ctx, 5*time.Second, func() error {
			if st, err := c2.Client.Status(ctx); err != nil || len(st.Approvals) != 1 || st.Approvals[0].Name != "w1" ||
				st.Approvals[0].Source != w1.IP || st.Approvals[0].Via == "" {
				return fmt.Errorf("c2's status while w1's join waits: %+v, %v", st, err)
			}
			return nil
		})
		if _, err := c2.Client.Approve(ctx, apitype.ApproveRequest{Name: "w1", Code: wrongCode(a.Code, 1)}); codes.Of(err) != codes.ApprovalWrongCode {
			t.Fatalf("a wrong code: %v, want %s", err, codes.ApprovalWrongCode)
		}
		if _, err := c2.Client.Approve(ctx, apitype.ApproveRequest{Name: "w1", Code: "12"}); codes.Of(err) != codes.BadRequest {
			t.Fatalf("a malformed code: %v, want %s", err, codes.BadRequest)
		}
		resp, err := c2.Client.Approve(ctx, apitype.ApproveRequest{Name: "w1", Code: a.Code[:3] + " " + a.Code[3:]})
		if err != nil || resp.Source != w1.IP {
			t.Fatalf("approve with the shown code: %+v, %v", resp, err)
		}
		if err := waitDone(t, done); err != nil {
			t.Fatalf("approved join: %v", err)
		}
		agenttest.WaitFor(t, ctx, 5*time.Second, func() error {
			if st, err := c2.Client.Status(ctx); err != nil || len(st.Approvals) != 0 {
				return fmt.Errorf("c2's status after the join: %+v, %v", st, err)
			}
			return nil
		})
		if row := tokenOf(origin, "w1"); row.State != apitype.TokenUsed || row.Approval.State != apitype.ApprovalStateApproved || row.Approval.Wrong != 1 {
			t.Fatalf("token row after the join: %+v %+v", row, row.Approval)
		}
		ev, err := origin.Client.Audit(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if e := lastEvent(t, ev, codes.EventJoinApproved, "w1"); e.Actor != fmt.Sprintf("uid=%d@c2", os.Getuid()) {
			t.Errorf("approval by %q, want the operator on c2", e.Actor)
		}
	})

	t.Run("burnt", func(t *testing.T) {
		w2 := agenttest.NewNode(t, "w2", clock)
		tok := origin.Admit(t, apitype.AdmitRequest{Name: "w2", Approve: true})
		shown, done := approvalJoin(t, w2, tok)
		a := waitShown(t, shown, done)
		for i := 1; i <= 5; i++ {
			want := codes.ApprovalWrongCode
			if i == 5 {
				want = codes.ApprovalBurnt
			}
			if _, err := origin.Client.Approve(ctx, apitype.ApproveRequest{Name: "w2", Code: wrongCode(a.Code, i)}); codes.Of(err) != want {
				t.Fatalf("wrong code %d: %v, want %s", i, err, want)
			}
		}
		if err := waitDone(t, done); codes.Of(err) != codes.ApprovalBurnt {
			t.Fatalf("join after five wrong codes: %v, want %s", err, codes.ApprovalBurnt)
		}
		if _, err := origin.Client.Approve(ctx, apitype.ApproveRequest{Name: "w2", Code: a.Code}); codes.Of(err) != codes.ApprovalNotPending {
			t.Fatalf("the right code after the burn: %v, want %s", err, codes.ApprovalNotPending)
		}
		if row := tokenOf(origin, "w2"); row.State != apitype.TokenRevoked || row.Approval.State != apitype.ApprovalStateBurnt {
			t.Fatalf("token row after the burn: %+v %+v", row, row.Approval)
		}
		for _, n := range origin.Nodes(t) {
			if n.Name == "w2" {
				t.Fatalf("a burnt token's join recorded %+v", n)
			}
		}
	})

	t.Run("one-live-token-a-name", func(t *testing.T) {
		// Issue 52's name rule: while an --approve token for w4 is live, a
		// second one is refused (NameTaken, naming the token). Revoking
		// the first ends its waiting join at once; then a new token for
		// w4 is minted and its join approved by its own code.
		w4, w4b := agenttest.NewNode(t, "w4", clock), agenttest.NewNode(t, "w4b", clock)
		older := origin.Admit(t, apitype.AdmitRequest{Name: "w4", Approve: true})
		shownOld, doneOld := approvalJoin(t, w4, older)
		waitShown(t, shownOld, doneOld)
		if _, err := origin.Client.Admit(ctx, apitype.AdmitRequest{Name: "w4", Approve: true}); codes.Of(err) != codes.NameTaken {
			t.Fatalf("a second token for w4 while the first is live: %v, want %s", err, codes.NameTaken)
		}
		var olderID string
		for _, tk := range tokens(t, origin) {
			if tk.Name == "w4" && tk.State == "unused" {
				olderID = tk.ID
			}
		}
		if _, err := origin.Client.RevokeToken(ctx, olderID); err != nil {
			t.Fatal(err)
		}
		if err := waitDone(t, doneOld); codes.Of(err) != codes.TokenRevoked {
			t.Fatalf("the revoked token's waiting join: %v, want %s", err, codes.TokenRevoked)
		}
		newer, err := origin.Client.Admit(ctx, apitype.AdmitRequest{Name: "w4", Approve: true})
		if err != nil {
			t.Fatalf("a token for w4 once the first is revoked: %v", err)
		}
		shownNew, doneNew := approvalJoin(t, w4b, newer.Token)
		a := waitShown(t, shownNew, doneNew)
		if _, err := c2.Client.Approve(ctx, apitype.ApproveRequest{Name: "w4", Code: a.Code}); err != nil {
			t.Fatalf("approve the new token's join: %v", err)
		}
		if err := waitDone(t, doneNew); err != nil {
			t.Fatalf("the new token's join: %v", err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		w3 := agenttest.NewNode(t, "w3", clock)
		tok := origin.Admit(t, apitype.AdmitRequest{Name: "w3", Approve: true, TTL: time.Minute})
		shown, done := approvalJoin(t, w3, tok)
		waitShown(t, shown, done)
		clock.Advance(2 * time.Minute)
		if err := waitDone(t, done); codes.Of(err) != codes.ApprovalTimeout {
			t.Fatalf("join past the token's expiry: %v, want %s", err, codes.ApprovalTimeout)
		}
		for _, n := range origin.Nodes(t) {
			if n.Name == "w3" {
				t.Fatalf("an unapproved join recorded %+v", n)
			}
		}
	})
}

// tokens is origin's token list.
func tokens(t *testing.T, origin *agenttest.Node) []apitype.Token {
	t.Helper()
	toks, err := origin.Client.Tokens(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return toks
}
