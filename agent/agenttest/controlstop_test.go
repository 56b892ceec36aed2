package agenttest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
)

// TestLeaderStopKeepsAdmitting (issue 54 item 4): of three control
// nodes, the raft leader, which a worker streams from, stops (SIGTERM:
// a restart, not a departure) while a follower admits back to back, as
// `meshctl admit` does. The leader hands leadership off, ends its
// streams and closes port 7300 at once, so no admission waits 1 s or
// more between two done and none fails (the stop took 3 s, and
// admissions stalled 3.1 s, while a worker's stream held it).
func TestLeaderStopKeepsAdmitting(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	c2 := agenttest.NewNode(t, "c2", clock)
	c3 := agenttest.NewNode(t, "c3", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")
	for _, n := range []*agenttest.Node{c2, c3} {
		if _, err := n.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: n.Name, Role: "control"})); err != nil {
			t.Fatalf("%s joins: %v", n.Name, err)
		}
	}
	// Through the origin: a worker streams from the seed it joined
	// through first.
	if _, err := w1.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatalf("w1 joins: %v", err)
	}
	if st, err := origin.Client.Status(t.Context()); err != nil || st.Raft != "leader" {
		t.Fatalf("origin's status before the stop: %+v, %v; want the leader", st, err)
	}

	type done struct {
		at  time.Time
		err error
	}
	var (
		mu      sync.Mutex
		log     []done
		stopped = make(chan struct{})
	)
	var admits sync.WaitGroup
	admits.Go(func() {
		after := 0 // admissions done after the stop returned
		for i := 0; after < 10; i++ {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			_, err := c2.Client.Admit(ctx, apitype.AdmitRequest{Name: fmt.Sprintf("a%d", i)})
			cancel()
			mu.Lock()
			log = append(log, done{time.Now(), err})
			mu.Unlock()
			select {
			case <-stopped:
				after++
			default:
			}
			if t.Context().Err() != nil {
				return
			}
		}
	})
	agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(log) < 3 {
			return fmt.Errorf("%d admissions done", len(log))
		}
		return nil
	})
	t0 := time.Now()
	origin.Stop(t)
	took := time.Since(t0)
	close(stopped)
	admits.Wait()

	mu.Lock()
	defer mu.Unlock()
	var stall time.Duration
	prev := time.Time{}
	for _, d := range log {
		if d.err != nil {
			t.Errorf("an admission through c2 failed %s after the stop began: %v", d.at.Sub(t0), d.err)
			continue
		}
		if !prev.IsZero() && d.at.After(t0) {
			stall = max(stall, d.at.Sub(prev))
		}
		prev = d.at
	}
	for _, line := range strings.Split(origin.Logs(), "\n") {
		if strings.Contains(line, "stopped serving") || strings.Contains(line, "leadership transfer") {
			t.Logf("origin: %s", line)
		}
	}
	t.Logf("origin stopped in %s; %d admissions through c2, the longest gap between two done %s", took, len(log), stall)
	if stall >= time.Second {
		t.Errorf("an admission waited %s while the leader stopped; want < 1 s", stall)
	}
	var leader string
	for _, n := range []*agenttest.Node{c2, c3} {
		if st, err := n.Client.Status(t.Context()); err == nil && st.Raft == "leader" {
			leader = n.Name
		}
	}
	if leader == "" {
		t.Error("neither c2 nor c3 leads after the origin stopped")
	}
}
