package gossip

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestLogSinkJSON: serf's and memberlist's lines, in json format, are one
// JSON object each with the level their tag names, lib, and memberlist's
// trailing peer address as the attribute from; log_level
// filters them (a memberlist DEBUG line is not printed at info), except a
// key error, which is always a warning with its code.
func TestLogSinkJSON(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar) // info
	s := newLogSink(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: lv})), time.Second)
	l := s.logger()
	l.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:5")
	l.Printf("[INFO] serf: EventMemberJoin: b 10.0.0.2")
	l.Printf("[WARN] memberlist: Was able to connect to b over TCP but UDP probes failed")
	l.Printf("[ERR] serf: Failed to update snapshot: disk full")
	l.Printf("[DEBUG] memberlist: failed to receive: No installed keys could decrypt the message from=127.0.0.1:6")
	lv.Set(slog.LevelDebug)
	l.Printf("[DEBUG] memberlist: Initiating push/pull sync with: b 10.0.0.2:7946")
	l.Printf("[DEBUG] memberlist: Stream connection from=10.0.0.2:40204")
	l.Printf("[ERR] memberlist: Failed to accept TCP connection: closed from=<unknown address>")
	l.Printf("[INFO] serf: a message with from=x in the middle")

	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	want := []map[string]any{
		{"level": "INFO", "lib": "serf", "msg": "EventMemberJoin: b 10.0.0.2"},
		{"level": "WARN", "lib": "memberlist", "msg": "Was able to connect to b over TCP but UDP probes failed"},
		{"level": "ERROR", "lib": "serf", "msg": "Failed to update snapshot: disk full"},
		{"level": "WARN", "lib": "memberlist", "code": string(codes.GossipKey), "from": "127.0.0.1:6",
			"msg": "failed to receive: No installed keys could decrypt the message"},
		{"level": "DEBUG", "lib": "memberlist", "msg": "Initiating push/pull sync with: b 10.0.0.2:7946", "from": nil},
		{"level": "DEBUG", "lib": "memberlist", "msg": "Stream connection", "from": "10.0.0.2:40204"},
		{"level": "ERROR", "lib": "memberlist", "msg": "Failed to accept TCP connection: closed", "from": "<unknown address>"},
		{"level": "INFO", "lib": "serf", "msg": "a message with from=x in the middle", "from": nil},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not one JSON object: %q: %v", i, line, err)
		}
		for k, v := range want[i] {
			if rec[k] != v {
				t.Errorf("line %d: %s = %#v, want %#v", i, k, rec[k], v)
			}
		}
	}
}

// TestLogSinkCutOff: while the node is cut off from its cluster on
// purpose, memberlist's failed sends are debug lines; other errors keep
// their level, and once whole again the sends' failures are errors.
func TestLogSinkCutOff(t *testing.T) {
	var buf bytes.Buffer
	g := &Gossip{sink: newLogSink(slog.New(slog.NewTextHandler(&buf, nil)), time.Second)}
	l := g.sink.logger()
	g.CutOff(true)
	l.Printf("[ERR] memberlist: Failed to send gossip to 10.42.0.1:7946: write udp: endpoint is in invalid state")
	l.Printf("[ERR] serf: Failed to update snapshot: disk full")
	g.CutOff(false)
	l.Printf("[ERR] memberlist: Failed to send ping: write udp: endpoint is in invalid state")
	out := buf.String()
	if strings.Contains(out, "Failed to send gossip") || !strings.Contains(out, "level=ERROR msg=\"Failed to update snapshot") ||
		!strings.Contains(out, "level=ERROR msg=\"Failed to send ping") {
		t.Fatalf("cut off, a failed send is not an error; other errors and a whole node's failed sends are:\n%s", out)
	}
}
