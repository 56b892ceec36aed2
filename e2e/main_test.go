//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(forgerEnv); spec != "" { // the test binary as a forged gossip member
		os.Exit(runForger(spec))
	}
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped: needs root (network namespaces, TUN devices)")
		os.Exit(0)
	}
	for _, tool := range []string{"ip", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s not found; run scripts/install-deps.sh\n", tool)
			os.Exit(1)
		}
	}
	dir, err := os.MkdirTemp("", "mshe-bin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	// `make e2e` starts several shards of this binary at once; one builds
	// while the others wait, then find the build in Go's cache.
	unlock := buildLock()
	for _, c := range []string{"meshd", "meshctl"} {
		// The flags `make build` and the packages use: what is measured is
		// what ships. The version tells it from the previous release's
		// build in a mixed cluster (TestRollingUpgrade).
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+currentVersion, "-o", filepath.Join(dir, c), "../cmd/"+c)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n%s", c, err, out)
			os.Exit(1)
		}
	}
	unlock()
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// buildLock takes an exclusive lock shared by every e2e process on the
// machine (a file under os.TempDir()) and returns its release. Without the
// lock, shards started together would each compile meshd from scratch.
func buildLock() func() {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "meshd-e2e-build.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return func() {} // no lock: each process builds on its own, more slowly
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return func() {}
	}
	return func() { _ = f.Close() }
}
