package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
)

// completionDaemon answers nodes and tokens as a control node would, with a
// node name and a token id a hostile member could not have made valid.
func completionDaemon(t *testing.T) string {
	t.Helper()
	exp := time.Date(2031, 1, 1, 0, 15, 0, 0, time.UTC)
	nodes := []apitype.Node{
		{Name: "origin", Role: "control", State: "active", Self: true},
		{Name: "c2", Role: "control", State: "active"},
		{Name: "c3", Role: "control", State: "failed"},
		{Name: "w1", Role: "worker", State: "active"},
		{Name: "w2", Role: "worker", State: "removed"},
		{Name: "bad name; rm -rf /", Role: "worker", State: "active"},
		{Name: "w3", Role: "worker\x1b[2J", State: "active\nforged"},
	}
	toks := []apitype.Token{
		{ID: "0123456789ab", Name: "w4", Role: "worker", State: "unused", Expires: exp},
		{ID: "abcdef012345", Name: "w5", Role: "control", State: "unused", Expires: exp,
			Approval: &apitype.TokenApproval{State: apitype.ApprovalStateWaiting}},
		{ID: "fedcba987654", Name: "w1", Role: "worker", State: "used", Expires: exp},
		{ID: "$(reboot)", Name: "w6", Role: "worker", State: "unused", Expires: exp},
	}
	return localclienttest.Serve(t, &fakeMeshd{
		nodes:  func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, nodes) },
		tokens: func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, toks) },
	})
}

// TestCompletion drives cobra's __complete as the shell scripts do: node
// names, token ids and codes are offered from the daemon (or the table),
// flag values from fixed lists. Goldens: testdata/complete_*.golden.
func TestCompletion(t *testing.T) {
	t.Setenv("TZ", "UTC")
	sock := completionDaemon(t)
	tests := []struct {
		name string
		args []string
	}{
		{"complete/remove", []string{"remove", ""}},
		{"complete/remove-prefix", []string{"remove", "w"}},
		{"complete/remove-second-arg", []string{"remove", "w1", ""}},
		{"complete/ca-handoff", []string{"ca", "handoff", ""}},
		{"complete/ping", []string{"ping", ""}},
		{"complete/tokens-revoke", []string{"tokens", "revoke", ""}},
		{"complete/approve", []string{"approve", ""}},
		{"complete/approve-code", []string{"approve", "w5", ""}},
		{"complete/explain", []string{"explain", "X4010"}},
		{"complete/explain-mnemonic", []string{"explain", "tkncn"}},
		{"complete/admit-role", []string{"admit", "w1", "--role", ""}},
		{"complete/nodes-output", []string{"nodes", "-o", ""}},
		{"complete/explain-output", []string{"explain", "--output", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, append([]string{"__complete", "--socket", sock}, tt.args...)...)
			if r.exit != exitOK || !strings.HasSuffix(r.stdout, ":4\n") {
				t.Fatalf("exit %d, stdout %q: want the no-file directive last", r.exit, r.stdout)
			}
			checkGolden(t, tt.name, r)
		})
	}
}

// TestCompletionDaemonDown: with meshd down, a dynamic completion offers
// nothing and says nothing but cobra's directive line.
func TestCompletionDaemonDown(t *testing.T) {
	for _, a := range [][]string{{"remove", ""}, {"tokens", "revoke", ""}, {"approve", ""}, {"ca", "handoff", ""}} {
		t.Run(strings.Join(a, "-"), func(t *testing.T) {
			r := meshctl(t, append([]string{"__complete", "--socket", nowhere(t)}, a...)...)
			if r.exit != exitOK || r.stdout != ":4\n" || r.stderr != "Completion ended with directive: ShellCompDirectiveNoFileComp\n" {
				t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant only the directive", r.exit, r.stdout, r.stderr)
			}
		})
	}
}

// TestSuggestions: a mistyped command gets cobra's "did you mean", and a
// usage error points at the help of the command that was run.
func TestSuggestions(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"usage/mistyped-command", []string{"stauts"}},
		{"usage/mistyped-prefix", []string{"tok"}},
		{"usage/mistyped-nothing-close", []string{"frobnicate"}},
		{"usage/mistyped-subcommand", []string{"ca", "rotat"}},
		{"usage/mistyped-tokens-subcommand", []string{"tokens", "revok"}},
		{"usage/remove-missing-name", []string{"remove"}},
		{"usage/remove-bad-flag", []string{"remove", "w1", "--bogus"}},
		{"usage/ca-handoff-extra", []string{"ca", "handoff", "c2", "c3"}},
		{"usage/root-bad-flag", []string{"--bogus"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, append([]string{"--socket", nowhere(t)}, tt.args...)...)
			if r.exit != exitUsage {
				t.Fatalf("exit %d, want %d\n%s", r.exit, exitUsage, r.stderr)
			}
			checkGolden(t, tt.name, r)
		})
	}
}
