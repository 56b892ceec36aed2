//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLogStreamJSON (issue 14 item 4): the real meshd binaries with
// log_format: json, a control node and a worker on kernel TUN: every line
// each wrote to stderr while the worker joined is one JSON object with a
// level and a msg, and raft's, serf's, memberlist's and Nebula's lines are
// among them (by lib), with no hclog or logrus text in between.
func TestLogStreamJSON(t *testing.T) {
	n := NewNet(t)
	n.ExtraConfig = "log_format: json\n"
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	w1 := n.NewNode("w1")
	w1.Start(t)
	w1.MustCtl(t, "join", origin.Admit(t, "w1"))

	Eventually(t, 10*time.Second, "raft, serf, memberlist and nebula lines, all JSON", func() error {
		libs := map[string]bool{}
		for _, nd := range []*Node{origin, w1} {
			b, err := os.ReadFile(nd.LogPath)
			if err != nil {
				return err
			}
			for line := range strings.SplitSeq(string(b), "\n") {
				if line == "" {
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("%s: not one JSON object: %q: %v", nd.NodeName, line, err)
				}
				if rec["level"] == nil || rec["msg"] == nil {
					t.Fatalf("%s: no level or msg: %q", nd.NodeName, line)
				}
				if lib, ok := rec["lib"].(string); ok {
					libs[lib] = true
				}
			}
		}
		for _, want := range []string{"raft", "serf", "memberlist", "nebula"} {
			if !libs[want] {
				return fmt.Errorf("no lib=%s line yet (libs: %v)", want, libs)
			}
		}
		return nil
	})
}
