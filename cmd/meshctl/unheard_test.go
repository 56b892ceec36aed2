package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// TestNodesUnheard: a node the control nodes' verdict found silent shows
// how long in its GOSSIP cell, with a note under the table; a heard one
// shows neither.
func TestNodesUnheard(t *testing.T) {
	now := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	heard := apitype.Node{Name: "w1", Role: "worker", State: "active", Gossip: "alive", OverlayIP: "10.42.0.2", Raft: "none"}
	silent := heard
	silent.Name, silent.OverlayIP, silent.Gossip, silent.Unheard = "w2", "10.42.0.3", "failed", now.Add(-12*time.Second)
	var out bytes.Buffer
	if err := printNodes(&out, []apitype.Node{heard, silent}, now, false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	lines := strings.Split(text, "\n")
	if !strings.Contains(lines[2], "failed (unheard 12s)") || strings.Contains(lines[1], "unheard") {
		t.Errorf("rows do not show w2 unheard 12s (and w1 not):\n%s", text)
	}
	if !strings.Contains(text, "unheard: no Nebula host update") {
		t.Errorf("no note explains unheard:\n%s", text)
	}
	out.Reset()
	if err := printNodes(&out, []apitype.Node{heard}, now, false); err != nil || strings.Contains(out.String(), "unheard") {
		t.Errorf("all heard: %v\n%s", err, out.String())
	}
}
