package agenttest_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// plan runs a join's plan on n and returns its result, failing the test if
// the plan could not run at all.
func plan(t *testing.T, n *agenttest.Node, token string) *apitype.PlanResult {
	t.Helper()
	var streamed []apitype.PlanCheck
	res, err := n.Client.Plan(t.Context(), apitype.JoinRequest{Token: token}, func(c apitype.PlanCheck) { streamed = append(streamed, c) })
	if err != nil {
		t.Fatalf("plan on %s: %v", n.Name, err)
	}
	if len(streamed) != len(res.Checks) {
		t.Fatalf("plan streamed %d checks, its result holds %d", len(streamed), len(res.Checks))
	}
	return res
}

// check returns the plan's check named name.
func check(t *testing.T, res *apitype.PlanResult, name string) apitype.PlanCheck {
	t.Helper()
	for _, c := range res.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, res.Checks)
	return apitype.PlanCheck{}
}

// wantCheck fails unless the check came out with status and code.
func wantCheck(t *testing.T, res *apitype.PlanResult, name string, status apitype.CheckStatus, code codes.Code) apitype.PlanCheck {
	t.Helper()
	c := check(t, res, name)
	if c.Status != status || c.Code != code {
		t.Fatalf("check %s = %s %s (%s), want %s %s\nall: %+v", name, c.Status, c.Code, c.Detail, status, code, res.Checks)
	}
	return c
}

// tokenState is the state `tokens` on n shows for the token admitting name.
func tokenState(t *testing.T, n *agenttest.Node, name string) string {
	t.Helper()
	toks, err := n.Client.Tokens(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks {
		if tok.Name == name {
			return tok.State
		}
	}
	t.Fatalf("no token for %s in %+v", name, toks)
	return ""
}

// TestJoinPlanInProcess (in-process agents): a plan on a good token passes every
// check and leaves the token unused; a taken port, a clock ten minutes
// off, a used token and a taken name each fail their check with its code
// and leave everything as it was.
func TestJoinPlanInProcess(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")
	tok := origin.Admit(t, apitype.AdmitRequest{Name: "w1"})

	t.Run("ok/good-token", func(t *testing.T) {
		res := plan(t, w1, tok)
		if !res.OK || res.Failed() != nil {
			t.Fatalf("plan failed: %+v", res.Checks)
		}
		for _, name := range []string{"token", "identity", "underlay", "port nebula", "tun", "state-dir", // no gossip port: a worker out of the pool
			"seed " + origin.IP + ":7300", "clock", "admission"} {
			wantCheck(t, res, name, apitype.CheckOK, "")
		}
		if res.Underlay != w1.IP || !strings.Contains(res.UnderlayWhy, "pinned") {
			t.Errorf("underlay %s (%s), want the pinned %s", res.Underlay, res.UnderlayWhy, w1.IP)
		}
		if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
			t.Fatalf("token %s after a plan", st)
		}
	})

	t.Run("fail/port-taken", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(w1.IP, "4242"))
		if err != nil {
			t.Fatal(err)
		}
		res := plan(t, w1, tok)
		_ = pc.Close()
		wantCheck(t, res, "port nebula", apitype.CheckFail, codes.PortInUse)
		wantCheck(t, res, "admission", apitype.CheckOK, "")
		if res.OK {
			t.Fatal("a plan with a taken port passed")
		}
		if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
			t.Fatalf("token %s after a plan", st)
		}
	})

	t.Run("fail/control-token-raft-port-taken", func(t *testing.T) {
		ctok := origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})
		c2 := agenttest.NewNode(t, "c2", clock)
		res := plan(t, c2, ctok)
		for _, name := range []string{"port gossip", "port nebula", "port control", "port raft", "admission"} {
			wantCheck(t, res, name, apitype.CheckOK, "")
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(c2.IP, "7301"))
		if err != nil {
			t.Fatal(err)
		}
		res = plan(t, c2, ctok)
		_ = ln.Close()
		wantCheck(t, res, "port raft", apitype.CheckFail, codes.PortInUse)
		if st := tokenState(t, origin, "c2"); st != apitype.TokenUnused {
			t.Fatalf("token %s after a plan", st)
		}
	})

	t.Run("fail/clock-ten-minutes-fast", func(t *testing.T) {
		fast := &agenttest.Clock{}
		fast.Advance(10 * time.Minute)
		w := agenttest.NewNode(t, "w1", fast)
		res := plan(t, w, tok)
		c := wantCheck(t, res, "clock", apitype.CheckFail, codes.ClockSkew)
		if !strings.Contains(c.Detail, "ahead by 10m") {
			t.Errorf("clock check %q does not say this clock is 10m ahead", c.Detail)
		}
		wantCheck(t, res, "admission", apitype.CheckSkip, "")
		// A real join refuses the same way, before the token is sent.
		_, err := w.Join(t, tok)
		if codes.Of(err) != codes.ClockSkew {
			t.Fatalf("join with a clock 10 minutes fast = %v, want %s", err, codes.ClockSkew)
		}
		if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
			t.Fatalf("token %s after a refused join", st)
		}
	})

	t.Run("fail/expired-by-this-clock-only", func(t *testing.T) {
		fast := &agenttest.Clock{}
		fast.Advance(20 * time.Minute) // past the token's 15 minutes
		w := agenttest.NewNode(t, "w1", fast)
		_, err := w.Join(t, tok)
		if codes.Of(err) != codes.ClockSkew || !strings.Contains(err.Error(), "not by") {
			t.Fatalf("join with the token expired by this clock only = %v, want %s blaming this clock", err, codes.ClockSkew)
		}
		wantCheck(t, plan(t, w, tok), "token", apitype.CheckFail, codes.ClockSkew)
		if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
			t.Fatalf("token %s after a refused join", st)
		}
	})

	t.Run("fail/used-token", func(t *testing.T) {
		if _, err := w1.Join(t, tok); err != nil {
			t.Fatalf("join: %v", err)
		}
		w := agenttest.NewNode(t, "w1b", clock)
		res := plan(t, w, tok)
		wantCheck(t, res, "admission", apitype.CheckFail, codes.TokenConsumed)
		wantCheck(t, res, "clock", apitype.CheckOK, "")
		// The joined node itself: its identity is in the way without --force.
		wantCheck(t, plan(t, w1, tok), "identity", apitype.CheckFail, codes.AlreadyJoined)
	})

	t.Run("fail/name-taken", func(t *testing.T) {
		// Two tokens for one name: issue 52's name rule refuses the
		// second mint while the first is live, and once the first has
		// joined, a mint for the name is refused by the node holding it.
		first := origin.Admit(t, apitype.AdmitRequest{Name: "w2"})
		if _, err := origin.Client.Admit(t.Context(), apitype.AdmitRequest{Name: "w2"}); codes.Of(err) != codes.NameTaken {
			t.Fatalf("a second live token for w2: %v, want %s", err, codes.NameTaken)
		}
		w2 := agenttest.NewNode(t, "w2", clock)
		wantCheck(t, plan(t, w2, first), "admission", apitype.CheckOK, "")
		if _, err := w2.Join(t, first); err != nil {
			t.Fatalf("join: %v", err)
		}
		if _, err := origin.Client.Admit(t.Context(), apitype.AdmitRequest{Name: "w2"}); codes.Of(err) != codes.NameTaken {
			t.Fatalf("a token for w2 once w2 joined: %v, want %s", err, codes.NameTaken)
		}
	})

	t.Run("fail/expired-token", func(t *testing.T) {
		tok4 := origin.Admit(t, apitype.AdmitRequest{Name: "w4", TTL: time.Minute})
		clock.Advance(2 * time.Minute) // every node's clock: the seed agrees
		w4 := agenttest.NewNode(t, "w4", clock)
		c := wantCheck(t, plan(t, w4, tok4), "token", apitype.CheckFail, codes.TokenExpired)
		if !strings.Contains(c.Detail, "agrees") {
			t.Errorf("expiry check %q does not say the seed's clock agrees", c.Detail)
		}
	})

	// No plan, check or refused join logged the token or its secret.
	checkNoSecrets(t, []string{tok}, origin, w1)
}
