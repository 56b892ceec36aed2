package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// approveMeshd is a stand-in meshd serving POST /v0/approve with answer;
// each request's body arrives on reqs.
func approveMeshd(t *testing.T, answer func(w http.ResponseWriter, req apitype.ApproveRequest)) (sock string, reqs chan apitype.ApproveRequest) {
	t.Helper()
	reqs = make(chan apitype.ApproveRequest, 4)
	return localclienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != apitype.Host || r.Method != http.MethodPost || r.URL.Path != apitype.PathApprove {
			http.NotFound(w, r)
			return
		}
		var req apitype.ApproveRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		reqs <- req
		answer(w, req)
	})), reqs
}

// TestApprove: `meshctl approve NAME CODE` sends both as given (meshd
// reads the code) and says which join it approved; meshd's refusals exit
// 1 with their code first on stderr; a wrong number of arguments exits 2
// before meshd is asked.
func TestApprove(t *testing.T) {
	ok := func(w http.ResponseWriter, req apitype.ApproveRequest) {
		writeJSON(w, http.StatusOK, apitype.ApproveResponse{Name: req.Name, TokenID: "0123456789ab", Source: "10.99.0.3",
			Via: "c2", Actor: "uid=0@c2"})
	}
	t.Run("ok/table", func(t *testing.T) {
		sock, reqs := approveMeshd(t, ok)
		r := meshctl(t, "--socket", sock, "approve", "w1", "123 456")
		if r.exit != exitOK || !strings.Contains(r.stdout, "approved the join of w1 from 10.99.0.3 (via c2)") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
		}
		if req := <-reqs; req.Name != "w1" || req.Code != "123 456" {
			t.Fatalf("meshd was asked %+v", req)
		}
	})
	t.Run("ok/json", func(t *testing.T) {
		sock, _ := approveMeshd(t, ok)
		r := meshctl(t, "--socket", sock, "approve", "w1", "123456", "-o", "json")
		var got apitype.ApproveResponse
		if r.exit != exitOK || json.Unmarshal([]byte(r.stdout), &got) != nil || got.Source != "10.99.0.3" || got.TokenID != "0123456789ab" {
			t.Fatalf("exit %d\nstdout:\n%s", r.exit, r.stdout)
		}
	})
	for _, code := range []codes.Code{codes.ApprovalWrongCode, codes.ApprovalBurnt, codes.ApprovalNotPending, codes.BadRequest, codes.NotControl} {
		t.Run("fail/"+string(code), func(t *testing.T) {
			sock, _ := approveMeshd(t, func(w http.ResponseWriter, req apitype.ApproveRequest) {
				writeJSON(w, code.Status(), apitype.NewError(code, errors.New("about "+req.Name)))
			})
			r := meshctl(t, "--socket", sock, "approve", "w1", "000000")
			checkFailure(t, r, exitFailure, code)
		})
	}
	for _, args := range [][]string{{"approve"}, {"approve", "w1"}, {"approve", "w1", "123", "456"}, {"approve", "w1", "123456", "-o", "yaml"}} {
		t.Run("usage/"+strings.Join(args, "_"), func(t *testing.T) {
			if r := meshctl(t, append([]string{"--socket", nowhere(t)}, args...)...); r.exit != exitUsage {
				t.Fatalf("exit %d, want %d\n%s", r.exit, exitUsage, r.stderr)
			}
		})
	}
}

// TestJoinShowsApprovalCode: a join line with an approval prints the code
// (grouped) and the command to run; with -o json every line is one JSON
// object, the approval and the result among them.
func TestJoinShowsApprovalCode(t *testing.T) {
	exp := time.Date(2031, 1, 1, 0, 15, 0, 0, time.UTC)
	f := &fakeMeshd{join: func(w http.ResponseWriter, _ *http.Request) {
		emit := apitype.StreamLines[apitype.JoinLine](w)
		emit(apitype.JoinLine{Step: "seed verified"})
		emit(apitype.JoinLine{Approval: &apitype.JoinApproval{Name: "w1", Code: "042917", Seed: "10.99.0.1:7300", Expires: exp}})
		emit(apitype.JoinLine{Result: &apitype.JoinResult{Cluster: "e2e", Node: "w1", Role: "worker", OverlayIP: "10.42.0.5"}})
	}}
	sock := localclienttest.Serve(t, f)
	r := meshctl(t, "--socket", sock, "join", "mesh1_x")
	if r.exit != exitOK || !strings.Contains(r.stdout, "waiting for approval: code 042 917") ||
		!strings.Contains(r.stdout, "meshctl approve w1 042917") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
	}
	r = meshctl(t, "--socket", sock, "join", "mesh1_x", "-o", "json")
	l := lines(r.stdout)
	if r.exit != exitOK || len(l) != 3 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
	}
	var ap, res apitype.JoinLine
	if json.Unmarshal([]byte(l[1]), &ap) != nil || ap.Approval == nil || ap.Approval.Code != "042917" || !ap.Approval.Expires.Equal(exp) {
		t.Fatalf("approval line %q", l[1])
	}
	if json.Unmarshal([]byte(l[2]), &res) != nil || res.Result == nil || res.Result.Node != "w1" {
		t.Fatalf("result line %q", l[2])
	}
}
