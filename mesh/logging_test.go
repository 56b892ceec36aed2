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

// TestLogBridgeJSON: in json format every Nebula record is one JSON object
// on one line, with its slog level, lib=nebula and its attributes (those
// Nebula added with With, and a group's as "group.key", too); log_level
// filters them (Nebula's info is meshd's debug) and a changed level
// applies at once. Nebula's debug is not produced at all.
func TestLogBridgeJSON(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar) // info
	ll, _ := newNebulaLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: lv})))

	ll.Warn("Handshake timed out", "vpnAddrs", []netip.Addr{netip.MustParseAddr("10.42.0.9")},
		"error", errors.New("i/o timeout"))
	ll.Info("Handshake message sent") // debug in meshd: hidden at info
	ll.Error("Failed to send handshake\nsecond line", "udpAddr", "192.0.2.1:4242")
	lv.Set(slog.LevelDebug - 4)
	ll.Info("Handshake message received")
	ll.Debug("Handshake message not sent again so soon") // Nebula's debug: not produced
	ll.With("vpnAddrs", []netip.Addr{netip.MustParseAddr("10.42.0.7")}).WithGroup("relay").
		Warn("Relay failed", "to", "10.42.0.1", slog.Group("state", "n", 2))

	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), buf.String())
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "Handshake timed out", "lib": "nebula", "vpnAddrs": "[10.42.0.9]", "error": "i/o timeout"},
		{"level": "ERROR", "msg": "Failed to send handshake\nsecond line", "lib": "nebula", "udpAddr": "192.0.2.1:4242"},
		{"level": "DEBUG", "msg": "Handshake message received", "lib": "nebula"},
		{"level": "WARN", "msg": "Relay failed", "lib": "nebula", "vpnAddrs": "[10.42.0.7]", "relay.to": "10.42.0.1", "relay.state.n": "2"},
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
