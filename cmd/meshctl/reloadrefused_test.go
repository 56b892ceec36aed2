package main

import (
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// problems is a refused config as meshd's checker reports it: an error
// with one line per problem (config.Errors).
type problems []string

func (p problems) Error() string   { return strings.Join(p, "; ") }
func (p problems) Lines() []string { return p }

// A refused reload prints every problem on a line of its own and says that
// meshd keeps running with its old config (it used to say "meshd did not
// start", though it was running).
func TestReloadRefusedGolden(t *testing.T) {
	refusal := apitype.NewError(codes.ReloadRefused, problems{"/etc/meshd/meshd.yaml: 2 problems",
		`line 3: log_level = "warning": must be debug, info, warn or error`,
		`line 4: log_levle: unknown key; did you mean log_level?`})
	sock := reloadDaemon(t, codes.ReloadRefused.Status(), refusal)
	r := meshctl(t, "--socket", sock, "reload")
	checkFailure(t, r, exitFailure, codes.ReloadRefused)
	if !strings.Contains(r.stderr, "keeps running") || strings.Contains(r.stderr, "did not start") {
		t.Fatalf("stderr must say meshd keeps running:\n%s", r.stderr)
	}
	checkGolden(t, "reload-refused", r)
	checkGolden(t, "reload-refused-json", meshctl(t, "--socket", sock, "reload", "-o", "json"))
}
