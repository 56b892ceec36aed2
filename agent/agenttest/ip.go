package agenttest

import (
	"testing"

	"github.com/meshd/meshd/loopbacktest"
)

// TakeIP reserves a loopback address in 127.77.0.0/16 for the rest of the
// test process (loopbacktest.HoldIP): a node's userspace Nebula cannot be
// stopped and keeps its UDP port on the address bound after the test
// ends, so the address must not go to a later test (TestJoinFailures once
// got "address already in use" that way).
func TakeIP(t testing.TB) string { return loopbacktest.HoldIP(t, "127.77") }
