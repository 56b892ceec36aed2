// Package stocknebula builds and runs stock Nebula for tests: the nebula
// binary of a released module version (by default Version, the one meshd
// embeds), built from the module proxy as upstream released it, never
// from meshd's patched copy in third_party/nebula. A test that says
// "stock Nebula accepts this" (the bundles of issue 35, nebulabundle)
// runs this binary.
//
// BinaryAt builds it once per machine and version: in a temporary module
// outside the repo whose go.mod requires github.com/slackhq/nebula at that
// version, never replaced, `go build github.com/slackhq/nebula/cmd/nebula`
// with the parent's go environment (GOTOOLCHAIN included: v1.12 needs Go
// 1.27.3) plus -mod=mod. Nebula's own code is upstream's; the only
// replacements are the stand-ins a version needs for the modules the
// module proxy refuses (standin.go; v1.12.0: the same three as
// third_party/nebula/PATCHES.md). The binary is kept under os.TempDir()
// keyed by version and platform, behind a lock file, so concurrent test
// binaries build it once and later runs not at all; each use checks, from
// the binary's own build information, that it is that module at that
// version with no replacement.
//
// Import rule (deps_test.go): may import no meshd package.
package stocknebula

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Module and Version are the Nebula module meshd embeds (go.mod's
// require, which TestVersionIsMeshds checks).
const (
	Module  = "github.com/slackhq/nebula"
	Version = "v1.12.0"
)

// Binary is BinaryAt(tb, Version): stock nebula of the version meshd
// embeds.
func Binary(tb testing.TB) string {
	tb.Helper()
	return BinaryAt(tb, Version)
}

// BinaryAt returns the path of the stock nebula binary of version (a
// module version, "v1.11.0"), building it on first use (about 30 s on 2
// cores). Under -short, with no binary cached yet, it skips the test. A
// failed build fails the test with the go command's output.
func BinaryAt(tb testing.TB, version string) string {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("meshd-stocknebula-%s-%s-%s", version, runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(dir, "nebula")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("stocknebula: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatalf("stocknebula: %v", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		tb.Fatalf("stocknebula: lock %s: %v", lock.Name(), err)
	}
	if err := Check(bin, version); err == nil {
		return bin
	} else if !errors.Is(err, os.ErrNotExist) {
		tb.Logf("stocknebula: rebuilding: %v", err)
	}
	if testing.Short() {
		tb.Skip("stocknebula: builds stock nebula (skipped under -short)")
	}
	if err := build(dir, bin, version); err != nil {
		tb.Fatalf("stocknebula: %v", err)
	}
	if err := Check(bin, version); err != nil {
		tb.Fatalf("stocknebula: the binary just built: %v", err)
	}
	return bin
}

// Check reports whether the binary at bin is Module's cmd/nebula at
// version, not replaced (so not meshd's patched copy).
func Check(bin, version string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return err
	}
	m := info.Main
	if info.Path != Module+"/cmd/nebula" || m.Path != Module {
		return fmt.Errorf("%s is %s of module %s, want %s/cmd/nebula", bin, info.Path, m.Path, Module)
	}
	if m.Version != version || m.Replace != nil {
		return fmt.Errorf("%s is %s %s (replaced: %v), want %s unreplaced", bin, m.Path, m.Version, m.Replace != nil, version)
	}
	return nil
}

// build makes bin in a fresh module under os.TempDir(), then moves it
// into place by rename, so a reader never sees half a binary. The go line
// is the least meshd's tests ever build with; the go command raises it to
// what the version requires (v1.12.0: 1.27.3).
func build(dir, bin, version string) error {
	mod, err := os.MkdirTemp("", "stocknebula-mod-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(mod)
	replaces, err := writeStandIns(mod, version)
	if err != nil {
		return err
	}
	gomod := fmt.Sprintf("module meshd.test/stocknebula\n\ngo 1.26\n\nrequire %s %s\n%s", Module, version, replaces)
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	env, err := goEnv()
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf("nebula.tmp-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, Module+"/cmd/nebula")
	cmd.Dir = mod
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("go build %s/cmd/nebula@%s: %v\n%s", Module, version, err, out)
	}
	return os.Rename(tmp, bin)
}

// goEnv is the parent's environment with its go settings made explicit
// (GOPROXY, GOFLAGS as `go env` reports them, so a go.env or GOENV file
// counts too), -mod=mod in place of any -mod flag (the temporary module
// has no go.sum yet), and workspaces off.
func goEnv() ([]string, error) {
	out, err := exec.Command("go", "env", "GOPROXY", "GOFLAGS").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("go env GOPROXY GOFLAGS: %q", out)
	}
	flags := []string{"-mod=mod"}
	for _, f := range strings.Fields(lines[1]) {
		if !strings.HasPrefix(f, "-mod=") && !strings.HasPrefix(f, "--mod=") {
			flags = append(flags, f)
		}
	}
	return append(os.Environ(), "GOPROXY="+lines[0], "GOFLAGS="+strings.Join(flags, " "), "GOWORK=off"), nil
}

// Test is TestAt(tb, Version, config, workDir).
func Test(tb testing.TB, config, workDir string) (output string, err error) {
	tb.Helper()
	return TestAt(tb, Version, config, workDir)
}

// TestAt runs stock nebula of version, `nebula -test -config config`, in
// workDir (Nebula reads relative pki paths from its working directory)
// and returns its output; err is non-nil when Nebula rejects the config (a
// non-zero exit).
func TestAt(tb testing.TB, version, config, workDir string) (output string, err error) {
	tb.Helper()
	cmd := exec.Command(BinaryAt(tb, version), "-test", "-config", config)
	cmd.Dir = workDir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	return buf.String(), err
}
