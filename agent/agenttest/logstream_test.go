package agenttest_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
)

// TestOneLogStream: with log_format: json, everything two real agents log
// while one inits and the other joins, raft's, serf's, memberlist's and
// Nebula's lines included, is one JSON object per line, with lib naming the
// library; at log_level: info no line is below info and none of the debug
// lines raft, memberlist and Nebula log at debug is there (they are
// filtered like meshd's own).
func TestOneLogStream(t *testing.T) {
	for _, tc := range []struct {
		level string
		libs  []string // libraries that must have logged
		// debug lines of raft, memberlist and Nebula (Nebula's info) that
		// the same init and join log at debug
		hidden []string
	}{
		{"debug", []string{"raft", "serf", "memberlist", "nebula"}, nil},
		{"info", []string{"raft", "serf"}, []string{"voting for self", "Stream connection", "Handshake message sent"}},
	} {
		t.Run(tc.level, func(t *testing.T) {
			clock := &agenttest.Clock{}
			jsonAt := func(c *config.File) { c.LogFormat, c.LogLevel = "json", tc.level }
			origin := agenttest.NewNodeAt(t, "origin", agenttest.TakeIP(t), clock, jsonAt)
			origin.Init(t, "alpha")
			// w1 in the gossip pool (workers are out of it by default), so
			// memberlist has a member to talk to and log about.
			inPool := func(c *config.File) { c.GossipPool = true }
			w1 := agenttest.NewNodeAt(t, "w1", agenttest.TakeIP(t), clock, jsonAt, inPool)
			if _, err := w1.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, n := range []*agenttest.Node{origin, w1} {
				for line := range strings.SplitSeq(n.Logs(), "\n") {
					if line == "" {
						continue
					}
					var rec map[string]any
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatalf("%s: not one JSON object: %q: %v", n.Name, line, err)
					}
					if tc.level == "info" && rec["level"] != "INFO" && rec["level"] != "WARN" && rec["level"] != "ERROR" {
						t.Errorf("%s: %v at log_level info", n.Name, rec)
					}
					msg, _ := rec["msg"].(string)
					for _, h := range tc.hidden {
						if strings.HasPrefix(msg, h) {
							t.Errorf("%s: a debug line at log_level %s: %v", n.Name, tc.level, rec)
						}
					}
					if lib, ok := rec["lib"].(string); ok {
						lib, _, _ = strings.Cut(lib, ".")
						seen[strings.TrimSuffix(strings.TrimSuffix(lib, "-net"), "-snapshot")] = true
					}
				}
			}
			for _, lib := range tc.libs {
				if !seen[lib] {
					got := make([]string, 0, len(seen))
					for l := range seen {
						got = append(got, l)
					}
					slices.Sort(got)
					t.Errorf("no line with lib=%s (libs seen: %v)", lib, got)
				}
			}
		})
	}
}
