package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer several goroutines may write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDaemonLoggerJournal: under journald every line starts with the
// syslog priority of its level (err, warning, info, debug) followed by the
// configured format without a timestamp; log_level filters, and a reload's
// level applies; outside journald there is no prefix and a timestamp.
func TestDaemonLoggerJournal(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			c := Default()
			c.LogFormat = format
			log, lv := c.NewDaemonLogger(&buf, true)
			log.Debug("hidden at info")
			log.Info("meshd ready", "version", "1.2.3")
			log.With("component", "raft").Warn("config reloaded; some changes need a restart", "code", "X200404RSTREQ")
			log.Error("control listener stopped", "err", "boom")
			lv.Set(slog.LevelDebug)
			log.Debug("shown at debug")
			log.Log(t.Context(), slog.LevelDebug-4, "trace hidden at debug")
			lv.Set(slog.LevelDebug - 4)
			log.Log(t.Context(), slog.LevelDebug-4, "trace is debug too")

			lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
			want := []struct{ prio, msg string }{
				{"<6>", "meshd ready"},
				{"<4>", "config reloaded; some changes need a restart"},
				{"<3>", "control listener stopped"},
				{"<7>", "shown at debug"},
				{"<7>", "trace is debug too"},
			}
			if len(lines) != len(want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
			}
			for i, line := range lines {
				rest, ok := strings.CutPrefix(line, want[i].prio)
				if !ok {
					t.Errorf("line %d %q lacks the prefix %s", i, line, want[i].prio)
					continue
				}
				if format == "json" {
					var rec map[string]any
					if err := json.Unmarshal([]byte(rest), &rec); err != nil {
						t.Errorf("line %d after the prefix is not one JSON object: %q: %v", i, rest, err)
					} else if rec["msg"] != want[i].msg || rec["time"] != nil {
						t.Errorf("line %d: %v, want msg %q and no time", i, rec, want[i].msg)
					}
				} else if !strings.HasPrefix(rest, "level=") || !strings.Contains(rest, fmt.Sprintf("msg=%q", want[i].msg)) &&
					!strings.Contains(rest, "msg="+want[i].msg) {
					t.Errorf("line %d: %q, want level= first (no time) and msg %q", i, rest, want[i].msg)
				}
			}
		})
	}

	var plain bytes.Buffer
	log, _ := Default().NewDaemonLogger(&plain, false)
	log.Warn("not under journald")
	if out := plain.String(); !strings.HasPrefix(out, "time=") || strings.HasPrefix(out, "<") {
		t.Errorf("outside journald: %q, want a timestamp and no priority prefix", out)
	}
}

// TestDaemonLoggerJournalConcurrent: records logged at once from many
// goroutines (through loggers derived with With, as each component's is)
// each keep their own priority.
func TestDaemonLoggerJournalConcurrent(t *testing.T) {
	var buf lockedBuffer
	c := Default()
	c.LogLevel = "debug"
	log, _ := c.NewDaemonLogger(&buf, true)
	levels := []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError}
	var wg sync.WaitGroup
	for g := range 8 {
		l := log.With("g", g)
		wg.Go(func() {
			for i := range 200 {
				lvl := levels[(g+i)%len(levels)]
				l.Log(t.Context(), lvl, "m", "lvl", lvl.String())
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	for _, line := range lines {
		_, lvl, _ := strings.Cut(line, " lvl=")
		var l slog.Level
		if err := l.UnmarshalText([]byte(lvl)); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if !strings.HasPrefix(line, journalPriority(l)) {
			t.Fatalf("line %q has the wrong priority for %s", line, l)
		}
	}
}
