package agenttest

import (
	"testing"

	"github.com/meshd/meshd/loopbacktest"
)

// TakeIP reserves a loopback address in 127.77.0.0/16 for the rest of the
// test (loopbacktest.TakeIP).
func TakeIP(t testing.TB) string { return loopbacktest.TakeIP(t, "127.77") }
