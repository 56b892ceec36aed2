package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
)

// TestLogBridgeJSON: in json format every Nebula entry is one JSON object
// on one line, with its slog level, lib=nebula and its logrus fields;
// log_level filters them (Nebula's info is meshd's debug) and a changed
// level applies at once.
func TestLogBridgeJSON(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar) // info
	ll, _ := newNebulaLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: lv})))

	ll.WithField("vpnAddrs", []netip.Addr{netip.MustParseAddr("10.42.0.9")}).
		WithError(errors.New("i/o timeout")).Warn("Handshake timed out")
	ll.Info("Handshake message sent") // debug in meshd: hidden at info
	ll.WithField("udpAddr", "192.0.2.1:4242").Error("Failed to send handshake\nsecond line")
	lv.Set(slog.LevelDebug)
	ll.Info("Handshake message received")

	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "Handshake timed out", "lib": "nebula", "vpnAddrs": "[10.42.0.9]", "error": "i/o timeout"},
		{"level": "ERROR", "msg": "Failed to send handshake\nsecond line", "lib": "nebula", "udpAddr": "192.0.2.1:4242"},
		{"level": "DEBUG", "msg": "Handshake message received", "lib": "nebula"},
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
