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

// auditMeshd serves GET /v0/audit with events, sending each request's
// since parameter to the returned channel.
func auditMeshd(t *testing.T, events []apitype.AuditEvent) (string, chan string) {
	t.Helper()
	since := make(chan string, 4)
	return localclienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != apitype.Host || r.Method != http.MethodGet || r.URL.Path != apitype.PathAudit {
			writeJSON(w, http.StatusNotFound, apitype.NewError(codes.BadRequest, nil))
			return
		}
		since <- r.URL.Query().Get("since")
		writeJSON(w, http.StatusOK, events)
	})), since
}

var auditRows = []apitype.AuditEvent{
	{At: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), Code: codes.EventClusterCreated, Event: "init", Actor: "uid=0@origin", Subject: "alpha"},
	{At: time.Date(2031, 1, 1, 0, 1, 0, 0, time.UTC), Code: codes.EventTokenMinted, Event: "admit", Actor: "uid=1000@c2", Subject: "w1",
		Detail: "token 0123456789ab\x1b[2J"},
}

func TestAudit(t *testing.T) {
	t.Run("ok/table", func(t *testing.T) {
		sock, since := auditMeshd(t, auditRows)
		r := meshctl(t, "--socket", sock, "audit")
		if r.exit != exitOK || <-since != "" {
			t.Fatalf("exit %d\n%s", r.exit, r.stderr)
		}
		ls := lines(r.stdout)
		if len(ls) != 3 || !strings.HasPrefix(ls[0], "TIME") || !strings.Contains(ls[2], "uid=1000@c2") ||
			!strings.Contains(ls[2], "admit") || strings.Contains(r.stdout, "\x1b") {
			t.Fatalf("table:\n%s", r.stdout)
		}
	})
	t.Run("ok/since-passed", func(t *testing.T) {
		sock, since := auditMeshd(t, auditRows[1:])
		if r := meshctl(t, "--socket", sock, "audit", "--since", "90m"); r.exit != exitOK {
			t.Fatalf("exit %d\n%s", r.exit, r.stderr)
		}
		if got := <-since; got != "1h30m0s" {
			t.Fatalf("meshd was asked for since=%q", got)
		}
	})
	t.Run("ok/json", func(t *testing.T) {
		sock, _ := auditMeshd(t, nil)
		r := meshctl(t, "--socket", sock, "audit", "-o", "json")
		if r.exit != exitOK || strings.TrimSpace(r.stdout) != "[]" {
			t.Fatalf("exit %d, stdout %q: want an empty array", r.exit, r.stdout)
		}
		sock, _ = auditMeshd(t, auditRows)
		r = meshctl(t, "--socket", sock, "audit", "-o", "json")
		var got []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 2 ||
			got[1]["actor"] != "uid=1000@c2" || got[1]["event"] != "admit" || got[1]["code"] != string(codes.EventTokenMinted) ||
			got[1]["at"] != "2031-01-01T00:01:00Z" || got[1]["subject"] != "w1" {
			t.Fatalf("JSON (%v):\n%s", err, r.stdout)
		}
	})
	for _, args := range [][]string{{"audit", "--since", "-5m"}, {"audit", "--since", "0"}, {"audit", "--since", "yesterday"}, {"audit", "x"}} {
		t.Run("usage/"+strings.Join(args[1:], "_"), func(t *testing.T) {
			if r := meshctl(t, append([]string{"--socket", nowhere(t)}, args...)...); r.exit != exitUsage {
				t.Fatalf("exit %d, want %d\n%s", r.exit, exitUsage, r.stderr)
			}
		})
	}
}
