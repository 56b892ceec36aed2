package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// planDaemon answers POST /v0/join/plan with checks, then their result,
// and records every request it is sent.
func planDaemon(t *testing.T, checks []apitype.PlanCheck) (string, chan apitype.JoinRequest) {
	t.Helper()
	reqs := make(chan apitype.JoinRequest, 8)
	sock := localclienttest.Serve(t, &fakeMeshd{plan: func(w http.ResponseWriter, r *http.Request) {
		var req apitype.JoinRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, apitype.NewError(codes.BadRequest, err))
			return
		}
		reqs <- req
		enc := json.NewEncoder(w)
		res := &apitype.PlanResult{Checks: checks, Underlay: "10.0.0.5"}
		for i := range checks {
			_ = enc.Encode(apitype.PlanLine{Check: &checks[i]})
		}
		res.OK = res.Failed() == nil
		_ = enc.Encode(apitype.PlanLine{Result: res})
	}})
	return sock, reqs
}

// TestJoinPlanCLI: `join --plan` sends the token (from a file) to meshd's
// plan, never to its join; prints every check; exits 0 only when every
// check passed, and otherwise 1 with the first failed check's code first
// on stderr; -o json prints the whole result. The token is never printed.
func TestJoinPlanCLI(t *testing.T) {
	good := []apitype.PlanCheck{
		{Name: "token", Status: apitype.CheckOK, Detail: "version 1"},
		{Name: "clock", Status: apitype.CheckWarn, Code: codes.ClockSkewWarning, Detail: "40s apart"},
		{Name: "admission", Status: apitype.CheckOK, Detail: "unused"},
	}
	bad := append([]apitype.PlanCheck{{Name: "port nebula", Status: apitype.CheckFail, Code: codes.PortInUse, Detail: "4242/udp taken"}},
		apitype.PlanCheck{Name: "admission", Status: apitype.CheckFail, Code: codes.TokenConsumed, Detail: "used"})
	file := writeTokenFile(t, joinTok+"\n", 0o600)

	sock, reqs := planDaemon(t, good)
	r := meshctl(t, "--socket", sock, "join", "--plan", "--token-file", file, "--advertise-iface", "eth1")
	if r.exit != 0 {
		t.Fatalf("exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}
	if req := <-reqs; req.Token != joinTok || req.AdvertiseIface != "eth1" {
		t.Fatalf("plan request %+v", req)
	}
	out := lines(r.stdout)
	if len(out) != 4 || !strings.HasPrefix(out[0], "ok") || !strings.Contains(out[1], string(codes.ClockSkewWarning)) ||
		!strings.HasPrefix(out[3], "plan: a join with this token would pass every check") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout+r.stderr, joinTok[6:]) {
		t.Fatal("the token was printed")
	}

	sock, _ = planDaemon(t, bad)
	r = meshctl(t, "--socket", sock, "join", "--plan", "--token-file", file)
	if first := lines(r.stderr); r.exit != 1 || len(first) == 0 || first[0] != string(codes.PortInUse)+": "+codes.PortInUse.Cause() {
		t.Fatalf("failing plan: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}
	if len(lines(r.stdout)) != 2 {
		t.Fatalf("failing plan printed:\n%s", r.stdout)
	}

	r = meshctl(t, "--socket", sock, "join", "--plan", "--token-file", file, "-o", "json")
	var res apitype.PlanResult
	if r.exit != 1 || json.Unmarshal([]byte(r.stdout), &res) != nil || res.OK || len(res.Checks) != 2 || res.Checks[1].Code != codes.TokenConsumed {
		t.Fatalf("-o json: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}

	// join -o json streams JSON lines (an approval code among them);
	// another format is a usage error.
	if r := meshctl(t, "--socket", sock, "join", "--token-file", file, "-o", "yaml"); r.exit != exitUsage {
		t.Fatalf("join -o yaml: exit %d, want %d", r.exit, exitUsage)
	}
}
