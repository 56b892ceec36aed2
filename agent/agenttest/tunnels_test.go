package agenttest_test

import (
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestTunnelView: GET /v0/tunnels on a control node names every active
// node; a worker's own report (pushed to a control node by its report
// loop) arrives without being asked; on a worker the route answers
// NotControl.
func TestTunnelView(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	c2 := agenttest.NewNode(t, "c2", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")
	if _, err := c2.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})); err != nil {
		t.Fatalf("control join: %v", err)
	}
	if _, err := w1.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatalf("worker join: %v", err)
	}
	// Each worker reports every control.TunnelReportEvery; the view is
	// read on both control nodes (the report is held by one of them).
	deadline := time.Now().Add(15 * time.Second)
	for !everyReported(t, origin, c2) {
		if time.Now().After(deadline) {
			t.Fatal("the view never had a report of every node")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := w1.Client.Tunnels(t.Context()); codes.Of(err) != codes.NotControl {
		t.Fatalf("tunnels on a worker: %v, want %s", err, codes.NotControl)
	}
}

// everyReported: the view on each of on names c2, origin and w1 as reported.
func everyReported(t *testing.T, on ...*agenttest.Node) bool {
	t.Helper()
	for _, n := range on {
		m, err := n.Client.Tunnels(t.Context())
		if err != nil {
			t.Fatalf("tunnels on %s: %v", n.Name, err)
		}
		s := ""
		for _, x := range m.Nodes {
			if x.Reported {
				s += x.Name + " "
			}
		}
		if s != "c2 origin w1 " {
			return false
		}
	}
	return true
}
