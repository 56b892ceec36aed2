package main

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"testing"
)

// TestRouteStdLog: a line printed through the standard library's log
// package arrives as one record of meshd's handler (here JSON) at info,
// with lib=log; at log_level warn it is filtered.
func TestRouteStdLog(t *testing.T) {
	prev, out, flags := slog.Default(), log.Writer(), log.Flags()
	t.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetOutput(out)
		log.SetFlags(flags)
	})
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	routeStdLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: lv})))
	log.Printf("bolt.Close(): funlock error: %s", "EBADF")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON object: %q: %v", buf.String(), err)
	}
	if rec["level"] != "INFO" || rec["lib"] != "log" || rec["msg"] != "bolt.Close(): funlock error: EBADF" {
		t.Errorf("record %v", rec)
	}
	buf.Reset()
	lv.Set(slog.LevelWarn)
	log.Print("hidden at warn")
	if buf.Len() != 0 {
		t.Errorf("printed at warn: %q", buf.String())
	}
}
