//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
