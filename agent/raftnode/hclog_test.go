package raftnode

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// SyncBuffer is a bytes.Buffer that raft's goroutines may write while the
// test reads. Exported (from a test file) for package raftnode_test too.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// jsonRecords parses out as one JSON object per line, failing the test on
// any line that is not one.
func jsonRecords(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not one JSON object: %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// TestHCLogAdapter: hclog records become slog records with slog's level,
// the hclog name as lib, and the arguments (With's first) as attributes;
// the slog handler's level filters them, and a changed level applies at
// once.
func TestHCLogAdapter(t *testing.T) {
	var buf SyncBuffer
	lv := new(slog.LevelVar) // info
	l := newHCLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: lv})), "raft")

	l.Trace("trace hidden")
	l.Debug("debug hidden")
	l.Info("entering leader state", "leader", raft.ServerAddress("10.0.0.1:7301"), "took", 1500*time.Millisecond)
	l.Named("repl").With("peer", "id-b").Warn("appendEntries rejected", "error", errors.New("boom"),
		"range", hclog.Fmt("%d-%d", 3, 9), "mode", hclog.Octal(8), "dangling")
	l.Error("failed to heartbeat")
	if l.IsDebug() || l.IsTrace() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("at info: IsDebug %v IsTrace %v IsInfo %v GetLevel %v", l.IsDebug(), l.IsTrace(), l.IsInfo(), l.GetLevel())
	}

	recs := jsonRecords(t, buf.String())
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3 (debug and trace filtered at info):\n%s", len(recs), buf.String())
	}
	want := []map[string]any{
		{"level": "INFO", "msg": "entering leader state", "lib": "raft", "leader": "10.0.0.1:7301", "took": "1.5s"},
		{"level": "WARN", "msg": "appendEntries rejected", "lib": "raft.repl", "peer": "id-b", "error": "boom",
			"range": "3-9", "mode": "010", hclog.MissingKey: "dangling"},
		{"level": "ERROR", "msg": "failed to heartbeat", "lib": "raft"},
	}
	for i, w := range want {
		for k, v := range w {
			if recs[i][k] != v {
				t.Errorf("record %d: %s = %#v, want %#v\n%v", i, k, recs[i][k], v, recs[i])
			}
		}
	}

	// A reload to debug shows raft's debug lines at once; trace stays
	// below it.
	lv.Set(slog.LevelDebug)
	l.Debug("debug shown")
	l.Trace("trace still hidden")
	if !l.IsDebug() || l.IsTrace() || l.GetLevel() != hclog.Debug {
		t.Errorf("at debug: IsDebug %v IsTrace %v GetLevel %v", l.IsDebug(), l.IsTrace(), l.GetLevel())
	}
	recs = jsonRecords(t, buf.String())
	if len(recs) != 4 || recs[3]["msg"] != "debug shown" || recs[3]["level"] != "DEBUG" {
		t.Errorf("after the level change: %d records, last %v", len(recs), recs[len(recs)-1])
	}

	// The standard-library bridge logs at its forced level.
	l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}).Print("from log.Logger")
	recs = jsonRecords(t, buf.String())
	if last := recs[len(recs)-1]; last["msg"] != "from log.Logger" || last["level"] != "WARN" {
		t.Errorf("standard logger record %v", last)
	}
}

// TestHCLogText: in text format a raft record is one logfmt line with its
// level, not hclog's own "[INFO]  raft:" format.
func TestHCLogText(t *testing.T) {
	var buf SyncBuffer
	l := newHCLog(slog.New(slog.NewTextHandler(&buf, nil)), "raft-net")
	l.Warn("failed to accept connection", "error", errors.New("EOF"))
	if got, want := buf.String(), "level=WARN msg=\"failed to accept connection\" lib=raft-net error=EOF\n"; !strings.HasSuffix(got, want) || strings.Count(got, "\n") != 1 {
		t.Errorf("text line %q, want it to end with %q", got, want)
	}
}
