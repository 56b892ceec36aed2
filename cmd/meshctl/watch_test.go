package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
)

// TestNodesWatch: `meshctl nodes --watch` draws the list, draws it again
// only when it changed (here once, when w2 appears, though meshd is asked
// every 100ms), and exits 0 when interrupted; with -o json each drawing is
// one JSON array on its own line. A too short interval is a usage error,
// and an unreachable meshd at the start fails as `nodes` does.
func TestNodesWatch(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		var calls atomic.Int32
		sock := localclienttest.Serve(t, &fakeMeshd{nodes: func(w http.ResponseWriter, _ *http.Request) {
			rows := []apitype.Node{{Name: "w1", Role: "worker", State: "active"}}
			if calls.Add(1) > 3 {
				rows = append(rows, apitype.Node{Name: "w2", Role: "worker", State: "joining"})
			}
			writeJSON(w, http.StatusOK, rows)
		}})
		ctx, cancel := context.WithTimeout(t.Context(), 900*time.Millisecond) // Ctrl-C, later
		args := []string{"--socket", sock, "nodes", "--watch", "--interval", "100ms"}
		if asJSON {
			args = append(args, "-o", "json")
		}
		var stdout, stderr bytes.Buffer
		exit := run(ctx, args, strings.NewReader(""), &stdout, &stderr)
		cancel()
		if exit != exitOK || stderr.Len() != 0 {
			t.Fatalf("json %v: exit %d, stderr %q", asJSON, exit, stderr.String())
		}
		if n := calls.Load(); n < 5 {
			t.Fatalf("json %v: meshd asked %d times in 900ms at a 100ms interval", asJSON, n)
		}
		out := stdout.String()
		if asJSON {
			ls := lines(out)
			if len(ls) != 2 {
				t.Fatalf("%d JSON lines, want 2 (a drawing per change):\n%s", len(ls), out)
			}
			for i, l := range ls {
				var rows []apitype.Node
				if err := json.Unmarshal([]byte(l), &rows); err != nil || len(rows) != i+1 {
					t.Fatalf("line %d %q: %d rows, %v", i, l, len(rows), err)
				}
			}
			continue
		}
		drawings := strings.Split(out, "-- ")[1:]
		if len(drawings) != 2 || strings.Contains(drawings[0], "w2") || !strings.Contains(drawings[1], "w2") ||
			strings.Count(out, "NAME ") != 2 {
			t.Fatalf("want two drawings, the second with w2:\n%s", out)
		}
	}

	r := meshctl(t, "--socket", nowhere(t), "nodes", "-w", "--interval", "10ms")
	if r.exit != exitUsage {
		t.Fatalf("--interval 10ms: exit %d, want %d; stderr %q", r.exit, exitUsage, r.stderr)
	}
	r = meshctl(t, "--socket", nowhere(t), "nodes", "-w")
	if r.exit != exitUnreachable {
		t.Fatalf("watch without meshd: exit %d, want %d; stderr %q", r.exit, exitUnreachable, r.stderr)
	}
}
