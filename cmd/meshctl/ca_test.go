package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// caMeshd serves GET /v0/ca and POST /v0/ca/rotate with st (or err),
// sending each rotate request's body to the returned channel.
func caMeshd(t *testing.T, st apitype.CAStatus, err *apitype.Error) (string, chan apitype.CARotateRequest) {
	t.Helper()
	rotates := make(chan apitype.CARotateRequest, 4)
	return localclienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == apitype.PathCAStatus:
		case r.Method == http.MethodPost && r.URL.Path == apitype.PathCARotate:
			var req apitype.CARotateRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			rotates <- req
		default:
			writeJSON(w, http.StatusNotFound, apitype.NewError(codes.BadRequest, nil))
			return
		}
		if err != nil {
			writeJSON(w, codes.NotCAHolder.Status(), err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})), rotates
}

var rotating = apitype.CAStatus{Phase: "reissue", Current: strings.Repeat("a", 64), Next: strings.Repeat("b", 64),
	Signing: strings.Repeat("b", 64), Holder: "origin", Started: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), Now: true,
	Certificates: []string{"w1: tls", "w1: nebula"}, Members: []string{"w1 (runs a TLS leaf of the old CA)"},
	Tokens: []string{"token for w3 (expires 2031-01-01T00:15:00Z)\x1b[2J"}}

func TestCA(t *testing.T) {
	t.Run("ok/status", func(t *testing.T) {
		sock, _ := caMeshd(t, rotating, nil)
		r := meshctl(t, "--socket", sock, "ca", "status")
		if r.exit != exitOK {
			t.Fatalf("exit %d\n%s", r.exit, r.stderr)
		}
		for _, want := range []string{"phase:    reissue", "next:     sha256:bbbbbbbbbbbbbbbb (since 2031-01-01T00:00:00Z, --now)",
			"still depending on the old CA (4):", "  w1: tls", "  w1: nebula", "  w1 (runs a TLS leaf of the old CA)", "  token for w3"} {
			if !strings.Contains(r.stdout, want+"\n") && !strings.Contains(r.stdout, want) {
				t.Errorf("no %q in:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "\x1b") || len(lines(r.stdout)) != 10 {
			t.Errorf("want 10 safe lines:\n%s", r.stdout)
		}
	})
	t.Run("ok/rotate-now-json", func(t *testing.T) {
		sock, rotates := caMeshd(t, rotating, nil)
		r := meshctl(t, "--socket", sock, "ca", "rotate", "--now", "-o", "json")
		var got apitype.CAStatus
		if r.exit != exitOK || json.Unmarshal([]byte(r.stdout), &got) != nil || got.Phase != "reissue" || len(got.Tokens) != 1 {
			t.Fatalf("exit %d\n%s%s", r.exit, r.stdout, r.stderr)
		}
		if req := <-rotates; !req.Now {
			t.Fatal("--now was not sent")
		}
	})
	t.Run("ok/rotate", func(t *testing.T) {
		sock, rotates := caMeshd(t, apitype.CAStatus{Phase: "none", Current: strings.Repeat("c", 64), Signing: strings.Repeat("c", 64)}, nil)
		r := meshctl(t, "--socket", sock, "ca", "rotate")
		if r.exit != exitOK || !strings.Contains(r.stdout, "phase:    none") || strings.Contains(r.stdout, "still depending") {
			t.Fatalf("exit %d\n%s%s", r.exit, r.stdout, r.stderr)
		}
		if req := <-rotates; req.Now {
			t.Fatal("--now sent without the flag")
		}
	})
	t.Run("fail/not-holder", func(t *testing.T) {
		sock, _ := caMeshd(t, rotating, apitype.NewError(codes.NotCAHolder, nil))
		r := meshctl(t, "--socket", sock, "ca", "rotate")
		if r.exit != exitFailure || !strings.HasPrefix(r.stderr, string(codes.NotCAHolder)) {
			t.Fatalf("exit %d\n%s", r.exit, r.stderr)
		}
	})
	for _, args := range [][]string{{"ca", "rotate", "x"}, {"ca", "status", "x"}, {"ca", "rotate", "--later"}} {
		t.Run("usage/"+strings.Join(args, "_"), func(t *testing.T) {
			if r := meshctl(t, append([]string{"--socket", nowhere(t)}, args...)...); r.exit != exitUsage {
				t.Fatalf("exit %d, want %d\n%s", r.exit, exitUsage, r.stderr)
			}
		})
	}
}
