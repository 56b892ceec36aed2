package meshd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// demoTools reads a DEMO_TOOLS_* list of scripts/demo-deps.sh.
func demoTools(t *testing.T, script, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `="([^"]*)"$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("scripts/demo-deps.sh has no %s=\"...\" line", name)
	}
	return strings.Fields(m[1])
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDemoDepsAgree: every tool `make demo` needs is one that
// scripts/install-deps.sh (what CI runs) checks for and installs; the e2e
// suite's own tool check asks for nothing the demo list lacks; and the
// Makefile's demo target runs the check in both of its forms.
func TestDemoDepsAgree(t *testing.T) {
	script := readFile(t, "scripts/demo-deps.sh")
	root, loopback := demoTools(t, script, "DEMO_TOOLS_ROOT"), demoTools(t, script, "DEMO_TOOLS_LOOPBACK")

	install := readFile(t, "scripts/install-deps.sh")
	installs := map[string]string{} // tool -> the Debian package that provides it
	for _, m := range regexp.MustCompile(`command -v (\S+) >/dev/null \|\| need\+=\((\S+)\)`).FindAllStringSubmatch(install, -1) {
		installs[m[1]] = m[2]
	}
	if !strings.Contains(install, "command -v go >/dev/null ||") {
		t.Error("install-deps.sh no longer checks for go")
	}
	installs["go"] = "(required, named by install-deps.sh)"
	for _, tool := range slices.Concat(root, loopback) {
		if _, ok := installs[tool]; !ok {
			t.Errorf("the demo needs %s, which scripts/install-deps.sh does not install (it installs %v)", tool, installs)
		}
	}
	if !slices.Contains(root, "go") || !slices.Contains(loopback, "go") {
		t.Error("both demo lists must name go")
	}

	// e2e/main_test.go: for _, tool := range []string{"ip", "ping"} {
	m := regexp.MustCompile(`for _, tool := range \[\]string\{([^}]*)\}`).FindStringSubmatch(readFile(t, "e2e/main_test.go"))
	if m == nil {
		t.Fatal("e2e/main_test.go: no tool list found")
	}
	for _, q := range strings.Split(m[1], ",") {
		if tool := strings.Trim(strings.TrimSpace(q), `"`); !slices.Contains(root, tool) {
			t.Errorf("the e2e suite (TestDemo's) needs %s; DEMO_TOOLS_ROOT lacks it", tool)
		}
	}

	mk := readFile(t, "Makefile")
	for _, want := range []string{"./scripts/demo-deps.sh root &&", "./scripts/demo-deps.sh loopback &&"} {
		if !strings.Contains(mk, want) {
			t.Errorf("Makefile's demo target does not run %q", want)
		}
	}
}

// TestDemoDepsInstalls runs scripts/demo-deps.sh with a stand-in installer:
// a missing tool makes it say so and run the installer, then check again;
// when the installer does not provide it, it fails naming the tool; when
// nothing is missing it runs nothing and prints nothing.
func TestDemoDepsInstalls(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	const tool = "meshd-demo-test-tool"
	run := func(t *testing.T, installs bool) (string, error, string) {
		bin := t.TempDir()
		ran := filepath.Join(t.TempDir(), "ran")
		installer := filepath.Join(t.TempDir(), "install")
		body := "#!/bin/sh\ntouch " + ran + "\n"
		if installs {
			body += "printf '#!/bin/sh\\n' > " + filepath.Join(bin, tool) + " && chmod +x " + filepath.Join(bin, tool) + "\n"
		}
		if err := os.WriteFile(installer, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bash, "scripts/demo-deps.sh", "root")
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
			"MESHD_INSTALL_DEPS="+installer, "MESHD_DEMO_TOOLS=sh "+tool)
		out, err := cmd.CombinedOutput()
		_, statErr := os.Stat(ran)
		if statErr == nil {
			return string(out), err, "ran"
		}
		return string(out), err, ""
	}
	t.Run("ok/missing-tool-installed", func(t *testing.T) {
		out, err, ran := run(t, true)
		if err != nil || ran == "" || !strings.Contains(out, tool+" not found; running") || !strings.Contains(out, "dependencies installed") {
			t.Fatalf("err %v, installer %q, output:\n%s", err, ran, out)
		}
	})
	t.Run("fail/installer-does-not-provide", func(t *testing.T) {
		out, err, ran := run(t, false)
		if err == nil || ran == "" || !strings.Contains(out, tool+" still not found") {
			t.Fatalf("err %v, installer %q, output:\n%s", err, ran, out)
		}
	})
	t.Run("ok/nothing-missing", func(t *testing.T) {
		cmd := exec.Command(bash, "scripts/demo-deps.sh", "loopback")
		cmd.Env = append(os.Environ(), "MESHD_INSTALL_DEPS=/nonexistent/installer", "MESHD_DEMO_TOOLS=sh")
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) != 0 {
			t.Fatalf("err %v, output %q: want silence", err, out)
		}
	})
	t.Run("usage/no-mode", func(t *testing.T) {
		if err := exec.Command(bash, "scripts/demo-deps.sh").Run(); err == nil {
			t.Fatal("demo-deps.sh without a mode succeeded")
		}
	})
}
