package agenttest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// joinLines decodes `meshctl join -o json` output: one JSON object per
// line, each with exactly one of step, warning, approval, result, error.
func joinLines(t *testing.T, r agenttest.Result) []apitype.JoinLine {
	t.Helper()
	var out []apitype.JoinLine
	for _, line := range strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n") {
		var raw map[string]json.RawMessage
		var l apitype.JoinLine
		if json.Unmarshal([]byte(line), &raw) != nil || json.Unmarshal([]byte(line), &l) != nil || len(raw) != 1 {
			t.Fatalf("line %q is not one JSON object with one field\nstdout:\n%s\nstderr:\n%s", line, r.Stdout, r.Stderr)
		}
		out = append(out, l)
	}
	return out
}

// TestJoinJSONStream: a real join with -o json through the real binaries
// streams each step as a JSON line as it happens and ends with the result;
// a failed join ends with an error line carrying the code (and exits 1
// with the code on stderr). Completion asks the same daemon: `remove`
// offers the other nodes, `tokens revoke` the unused token.
func TestJoinJSONStream(t *testing.T) {
	origin := agenttest.NewProc(t, "origin")
	origin.Start(t)
	w1 := agenttest.NewProc(t, "w1")
	w1.Start(t)
	w2 := agenttest.NewProc(t, "w2")
	w2.Start(t)
	if r := origin.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: exit %d\n%s", r.Exit, r.Stderr)
	}
	admit := func(name string) string {
		r := origin.Ctl(t, "admit", name, "-o", "json")
		var a struct{ Token, ID string }
		if r.Exit != 0 || json.Unmarshal([]byte(r.Stdout), &a) != nil {
			t.Fatalf("admit %s: exit %d\n%s%s", name, r.Exit, r.Stdout, r.Stderr)
		}
		return a.Token
	}
	tok := admit("w1")

	r := w1.Ctl(t, "join", tok, "-o", "json")
	if r.Exit != 0 {
		t.Fatalf("join -o json: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	ls := joinLines(t, r)
	last := ls[len(ls)-1]
	if last.Result == nil || last.Result.Node != "w1" || last.Result.Role != "worker" || last.Result.Cluster != "alpha" || last.Result.OverlayIP == "" {
		t.Fatalf("last line %+v, want the result for w1\n%s", last, r.Stdout)
	}
	var steps []string
	for _, l := range ls[:len(ls)-1] {
		if l.Result != nil || l.Error != nil {
			t.Fatalf("a result or error before the last line:\n%s", r.Stdout)
		}
		if l.Step != "" {
			steps = append(steps, l.Step)
		}
	}
	joined := strings.Join(steps, "\n")
	for _, want := range []string{"token checked", "seed verified"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no %q step among:\n%s", want, joined)
		}
	}
	if len(steps) < 3 {
		t.Errorf("%d steps, want the join's steps one per line:\n%s", len(steps), joined)
	}

	// The same token again: the last line is the error, with its code.
	r = w2.Ctl(t, "join", tok, "-o", "json")
	expectCode(t, r, codes.TokenConsumed, 1)
	ls = joinLines(t, r)
	if e := ls[len(ls)-1].Error; e == nil || e.ErrCode != codes.TokenConsumed || e.Remedy != codes.TokenConsumed.Remedy() {
		t.Fatalf("last line %+v, want the error %s\n%s", ls[len(ls)-1], codes.TokenConsumed, r.Stdout)
	}

	// Completion from the live daemon.
	admit("w3")
	r = origin.Ctl(t, "__complete", "remove", "")
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "w1\tworker, active\n") || strings.Contains(r.Stdout, "origin") || !strings.HasSuffix(r.Stdout, ":4\n") {
		t.Fatalf("__complete remove: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	var toks []apitype.Token
	if r := origin.Ctl(t, "tokens", "-o", "json"); json.Unmarshal([]byte(r.Stdout), &toks) != nil {
		t.Fatalf("tokens -o json: %s", r.Stdout)
	}
	var unusedID string
	for _, tk := range toks {
		if tk.Name == "w3" {
			unusedID = tk.ID
		}
	}
	r = origin.Ctl(t, "__complete", "tokens", "revoke", "")
	if r.Exit != 0 || unusedID == "" || !strings.HasPrefix(r.Stdout, unusedID+"\tw3, worker, expires ") || strings.Count(r.Stdout, "\n") != 2 {
		t.Fatalf("__complete tokens revoke: exit %d, want only %s (w3's unused token)\n%s%s", r.Exit, unusedID, r.Stdout, r.Stderr)
	}
}
