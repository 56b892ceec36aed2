package agenttest_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestShutdownAnswersStopping: from the moment meshd is told to stop
// until its socket closes, a command answers codes.DaemonStopping
// (retryable), never codes.NotInCluster and its "run meshctl init" remedy
// (issue 28 item 3: 20-50 ms of NOTINCLUSTER after SIGTERM, 5 of 5
// rounds). It holds a control node where it has begun stopping, then
// lets it stop while admissions run back to back until the socket closes.
func TestShutdownAnswersStopping(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	origin.Init(t, "alpha")
	admit := func() codes.Code {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := origin.Client.Admit(ctx, apitype.AdmitRequest{Name: "w1"})
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT):
			return "gone" // the socket is closed: meshd has stopped
		}
		return codes.Of(err)
	}
	// Held where it has begun stopping (before its runtime stops): every
	// admission is answered DaemonStopping, none minted.
	release, wait := origin.Signal(t)
	for i := range 3 {
		if c := admit(); c != codes.DaemonStopping {
			release()
			t.Fatalf("admission %d after the stop began: %s, want %s", i, c, codes.DaemonStopping)
		}
	}
	// Then, while the runtime stops and until the socket closes: the same
	// answer, never NotInCluster.
	release()
	seen := map[codes.Code]int{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c := admit()
		seen[c]++
		if c == "gone" {
			break
		}
	}
	wait()
	t.Logf("answers while the runtime stopped: %v", seen)
	for c, n := range seen {
		if c != "gone" && c != codes.DaemonStopping && c != codes.DaemonUnreachable {
			t.Errorf("%d admissions answered %s while meshd stopped; want %s", n, c, codes.DaemonStopping)
		}
	}
	if seen["gone"] == 0 {
		t.Fatal("the socket still answered 20 s after the stop")
	}
}
