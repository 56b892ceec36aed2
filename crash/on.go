//go:build crashpoints

package crash

import (
	"fmt"
	"os"
	"syscall"
)

// Env names the crash point a test build dies at.
const Env = "MESHD_CRASH_AT"

// Enabled reports whether this build has crash points.
const Enabled = true

var at = os.Getenv(Env)

// At kills this process with SIGKILL (a crash: no deferred function, no
// flush, no exit code of its own) if MESHD_CRASH_AT names point.
func At(point string) {
	if point == "" || point != at {
		return
	}
	fmt.Fprintf(os.Stderr, "crash point %s: SIGKILL\n", point)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
