package agenttest_test

import (
	"os"
	"runtime/pprof"
	"testing"
)

// scaleProfileEnv names a directory for the CPU profiles of
// BenchmarkControlScale's idle windows (what an idle control node spends
// its time on, issue 54).
const scaleProfileEnv = "MESHD_SCALE_PROFILE"

// profileIdle starts a CPU profile of the next idle window when
// MESHD_SCALE_PROFILE is set; the returned func stops it.
func profileIdle(tb testing.TB) func() {
	dir := os.Getenv(scaleProfileEnv)
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("%s: %v", scaleProfileEnv, err)
	}
	f, err := os.CreateTemp(dir, "idle-*.pprof")
	if err != nil {
		tb.Fatalf("%s: %v", scaleProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		tb.Fatalf("%s: %v", scaleProfileEnv, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		tb.Logf("idle CPU profile: %s", f.Name())
	}
}
