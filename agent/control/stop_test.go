package control

import (
	"errors"
	"testing"
	"time"

	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestStopServingHandsOffFirst (issue 54 item 4): a stopping control
// node that leads raft and serves a worker's stream hands leadership to
// the other voter, ends the stream and closes port 7300, within the
// hand-off's bound; a lone control node stops serving as fast.
func TestStopServingHandsOffFirst(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	s := openWatch(t, cl, origin.addr, 0)
	s.next(t)
	if !origin.p.Raft().IsLeader() {
		t.Fatal("the origin does not lead")
	}
	start := time.Now()
	origin.p.StopServing(origin.srv)
	took := time.Since(start)
	if took > HandOffBound+500*time.Millisecond {
		t.Errorf("StopServing took %s", took)
	}
	if origin.p.Raft().IsLeader() {
		t.Error("the origin still leads after StopServing")
	}
	waitFor(t, 5*time.Second, "c2 leads", c2.p.Raft().IsLeader)
	select {
	case <-s.ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the stream is still open 2 s after StopServing")
	}
	cl.CloseIdle()
	if err := cl.Call(t.Context(), origin.addr, PathNodes, false, nil, nil); !errors.Is(err, ErrUnreachable) {
		t.Errorf("a call after StopServing: %v, want ErrUnreachable (port 7300 closed)", err)
	}
	t.Logf("StopServing took %s", took.Round(time.Millisecond))

	// A lone voter has nobody to hand off to.
	_, lone := newCluster(t)
	start = time.Now()
	lone.p.StopServing(lone.srv)
	if d := time.Since(start); d > 500*time.Millisecond || !lone.p.Raft().IsLeader() {
		t.Errorf("a lone control node: StopServing took %s, leads %v", d, lone.p.Raft().IsLeader())
	}
}
