package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestSkewedLeaderTimesJoinsItself: a leader whose clock runs 2 h ahead
// of the seed that admitted a join fails it only once it has itself seen
// it pending for the join bound, not at once (issue 28 item 1: it
// subtracted the seed's admission time from its own clock and failed a
// healthy join about 2 s after admission).
func TestSkewedLeaderTimesJoinsItself(t *testing.T) {
	const bound = 2 * time.Second
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, joinBound: bound,
		nows: map[string]func() time.Time{"c2": func() time.Time { return time.Now().Add(2 * time.Hour) }}}
	origin := c.bootstrap(t, nil)
	c2 := c.joinControl(t, origin, "c2")
	if err := origin.p.Raft().HandOff(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "c2 leads", func() bool { return c2.p.Raft().IsLeader() })

	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	admitted := time.Now()
	nodeID := c.enrollLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id) // served by origin, never confirmed
	// Four of the leader's sweeps (every bound/4) see it joining and leave it.
	for time.Since(admitted) < bound-100*time.Millisecond {
		if n, _ := c2.p.Raft().FSM().Node(nodeID); n.State != state.NodeJoining {
			t.Fatalf("w1 is %s %s after its admission (%s), before the %s bound", n.State, time.Since(admitted).Round(time.Millisecond), n.Cause, bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Past the bound by the leader's own measure it fails, as any
	// unconfirmed join does.
	waitState(t, c2, nodeID, state.NodeFailed)
	if el := time.Since(admitted); el > 2*bound {
		t.Errorf("w1 failed %s after its admission, want within 1.5 bounds (%s)", el.Round(time.Millisecond), bound)
	}
}
