package main

import (
	"errors"
	"net/http"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// TestJoinJSON: `join -o json` prints each line of the join as one JSON
// object as it arrives and ends with the result, or on a failure with an
// error object (code, cause, remedy, detail) while stderr and the exit code
// stay the failure contract's. Goldens: testdata/join-json_*.golden.
func TestJoinJSON(t *testing.T) {
	stream := func(lines ...apitype.JoinLine) string {
		return localclienttest.Serve(t, &fakeMeshd{join: func(w http.ResponseWriter, _ *http.Request) {
			emit := apitype.StreamLines[apitype.JoinLine](w)
			for _, l := range lines {
				emit(l)
			}
		}})
	}
	steps := []apitype.JoinLine{
		{Step: "token checked: admits w1 as worker in cluster 0123abcd, expires in 14m"},
		{Warning: &apitype.Warning{Code: codes.ClockSkewWarning, Detail: "clock 40s ahead of the seed"}},
		{Step: "seed verified"},
	}
	tests := []struct {
		name string
		sock string
		exit int
		code codes.Code
	}{
		{"join-json/ok", stream(append(steps, apitype.JoinLine{Result: &apitype.JoinResult{Cluster: "alpha", Node: "w1", Role: "worker", OverlayIP: "10.42.0.2"}})...),
			exitOK, ""},
		{"join-json/refused", stream(append(steps, apitype.JoinLine{Error: apitype.NewError(codes.TokenConsumed, errors.New("used by w9"))})...),
			exitFailure, codes.TokenConsumed},
		{"join-json/cut-short", stream(steps...), exitFailure, codes.JoinUnconfirmed},
		{"join-json/unreachable", "/nonexistent/meshd.sock", exitUnreachable, codes.DaemonUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, "--socket", tt.sock, "join", joinTok, "-o", "json")
			if tt.code != "" {
				checkFailure(t, r, tt.exit, tt.code)
			} else if r.exit != tt.exit {
				t.Fatalf("exit %d\n%s%s", r.exit, r.stdout, r.stderr)
			}
			checkGolden(t, tt.name, r)
		})
	}
}
