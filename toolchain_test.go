package meshd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goModToolchain is go.mod's toolchain line ("go1.27.4").
func goModToolchain(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^toolchain (go\S+)$`).FindStringSubmatch(readFile(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod has no toolchain line: the project's scripts fetch the toolchain it names (DESIGN §12)")
	}
	return m[1]
}

// toolchainExport is the line each script that runs go carries.
const toolchainExport = `export GOTOOLCHAIN=$(sed -n 's/^toolchain //p' `

// runsGo matches a go command in a shell script (not "go" in a comment or
// a word).
var runsGo = regexp.MustCompile(`(?m)^[^#\n]*(^|[\s;&|(])go (test|build|run|mod|env|install|vet|tool|version|list|generate)\b`)

// TestToolchainEverywhere: a machine whose go.env says GOTOOLCHAIN=local
// (as this image's does) runs `make demo` and `make test` with nothing done
// by hand: the Makefile exports GOTOOLCHAIN as go.mod's toolchain line
// names it, even with the variable unset in the environment, and every
// script under scripts/ and .ci/ that runs go exports it the same way
// (the go commands tests start inherit it).
func TestToolchainEverywhere(t *testing.T) {
	want := goModToolchain(t)

	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "--eval", "meshd-toolchain-probe: ; @echo $$GOTOOLCHAIN", "meshd-toolchain-probe")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOTOOLCHAIN=") && !strings.HasPrefix(kv, "MAKEFLAGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("the Makefile's recipes see GOTOOLCHAIN=%q, want go.mod's toolchain %q", got, want)
	}

	scripts, err := filepath.Glob("scripts/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range append(scripts, ".ci/run") {
		text := readFile(t, path)
		if !runsGo.MatchString(text) {
			continue
		}
		checked++
		if !strings.Contains(text, toolchainExport) {
			t.Errorf("%s runs go but does not set GOTOOLCHAIN from go.mod (%s...)", path, toolchainExport)
		}
	}
	if checked < 4 {
		t.Errorf("found %d scripts that run go; the pattern no longer finds them", checked)
	}
}
