package agenttest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestCLITokenRevoke drives `meshctl tokens revoke` through real meshd and
// meshctl binaries: admit, revoke, and a join with the revoked token fails
// with TokenRevoked and changes nothing, on the joiner or in the cluster.
// A fresh token then joins, and revoking a used token is refused.
func TestCLITokenRevoke(t *testing.T) {
	origin := agenttest.NewProc(t, "origin")
	origin.Start(t)
	w1 := agenttest.NewProc(t, "w1")
	w1.Start(t)
	if r := origin.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: exit %d\n%s", r.Exit, r.Stderr)
	}
	admit := func() (token, id string) {
		t.Helper()
		r := origin.Ctl(t, "admit", "w1", "-o", "json")
		var a struct{ Token, ID string }
		if r.Exit != 0 || json.Unmarshal([]byte(r.Stdout), &a) != nil || len(a.ID) != 12 {
			t.Fatalf("admit -o json: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
		}
		return a.Token, a.ID
	}
	tokens := func() []apitype.Token {
		t.Helper()
		r := origin.Ctl(t, "tokens", "-o", "json")
		var toks []apitype.Token
		if r.Exit != 0 || json.Unmarshal([]byte(r.Stdout), &toks) != nil {
			t.Fatalf("tokens -o json: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
		}
		return toks
	}
	tok, id := admit()

	// Usage mistakes exit 2; an unknown id is a coded failure.
	for _, args := range [][]string{{"tokens", "revoke"}, {"tokens", "revoke", "abc"}, {"tokens", "revoke", tok}} {
		if r := origin.Ctl(t, args...); r.Exit != 2 || strings.Contains(r.Stderr, tok[6:]) {
			t.Fatalf("%v: exit %d, want 2 (and the token never echoed)\n%s", args[:2], r.Exit, r.Stderr)
		}
	}
	expectCode(t, origin.Ctl(t, "tokens", "revoke", "0000000000ff"), codes.TokenUnknown, 1)

	r := origin.Ctl(t, "tokens", "revoke", id)
	if r.Exit != 0 || !strings.Contains(r.Stdout, id) || !strings.Contains(r.Stdout, "revoked") {
		t.Fatalf("tokens revoke: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	if r := origin.Ctl(t, "tokens"); r.Exit != 0 || !strings.Contains(r.Stdout, "revoked") {
		t.Fatalf("tokens table: exit %d\n%s", r.Exit, r.Stdout)
	}
	toksBefore, nodesBefore := tokens(), nodesJSON(t, origin)
	if len(toksBefore) != 1 || toksBefore[0].ID != id || toksBefore[0].State != apitype.TokenRevoked || toksBefore[0].RevokedAt.IsZero() {
		t.Fatalf("tokens after the revocation: %+v", toksBefore)
	}

	// A join with the revoked token fails with its code and changes nothing.
	expectCode(t, w1.Ctl(t, "join", tok), codes.TokenRevoked, 1)
	if got := tokens(); !reflect.DeepEqual(got, toksBefore) {
		t.Fatalf("the failed join changed the tokens:\n got %+v\nwant %+v", got, toksBefore)
	}
	if got := nodesJSON(t, origin); len(got) != len(nodesBefore) || len(got) != 1 {
		t.Fatalf("the failed join changed the nodes: %v", got)
	}
	if r := w1.Ctl(t, "status"); r.Exit != 0 || !strings.Contains(r.Stdout, "has not joined") {
		t.Fatalf("w1 after the failed join: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(w1.Dir, "node.json")); !os.IsNotExist(err) {
		t.Fatalf("w1 wrote node.json after a refused join: %v", err)
	}

	// Again: exit 0, nothing changes; -o json says so.
	r = origin.Ctl(t, "tokens", "revoke", id[:8], "-o", "json")
	var again apitype.RevokeResponse
	if r.Exit != 0 || json.Unmarshal([]byte(r.Stdout), &again) != nil || !again.AlreadyRevoked ||
		!again.Token.RevokedAt.Equal(toksBefore[0].RevokedAt) {
		t.Fatalf("revoke again: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}

	// A fresh token for the same name joins; once used, it cannot be revoked.
	tok2, id2 := admit()
	if r := w1.Ctl(t, "join", tok2); r.Exit != 0 {
		t.Fatalf("join with a fresh token: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	expectCode(t, origin.Ctl(t, "tokens", "revoke", id2), codes.TokenConsumed, 1)
	for _, tk := range tokens() {
		if tk.ID == id2 && tk.State != apitype.TokenUsed {
			t.Fatalf("the used token is %s", tk.State)
		}
	}
}
