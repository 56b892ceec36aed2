package agenttest_test

import (
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// TestForceJoinVerifiesFirst: `join --force` on a running member checks
// the new token's seeds before it leaves its cluster. With a token whose
// only seed is down, the join is refused with SeedsUnreachable and the
// node is still a running, active member of its cluster: leaving first
// would have cost it its membership for a join that could not happen.
func TestForceJoinVerifiesFirst(t *testing.T) {
	clock := &agenttest.Clock{}
	quick := func(c *config.File) { c.ReconcileInterval = 200 * time.Millisecond }
	alpha := agenttest.NewNodeAt(t, "origin", agenttest.TakeIP(t), clock, quick)
	alpha.Init(t, "alpha")
	w1 := agenttest.NewNodeAt(t, "w1", agenttest.TakeIP(t), clock, quick)
	if _, err := w1.Join(t, alpha.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatalf("join alpha: %v", err)
	}

	beta := agenttest.NewNodeAt(t, "beta", agenttest.TakeIP(t), clock, quick)
	beta.Init(t, "beta")
	tok := beta.Admit(t, apitype.AdmitRequest{Name: "w1b"})
	beta.Stop(t) // the token's only seed is gone

	_, err := w1.Client.Join(t.Context(), apitype.JoinRequest{Token: tok, Force: true}, func(l apitype.JoinLine) {
		t.Logf("w1 join --force: %s", l.Step)
	})
	if codes.Of(err) != codes.SeedsUnreachable {
		t.Fatalf("join --force with an unreachable seed: %v (code %s), want %s", err, codes.Of(err), codes.SeedsUnreachable)
	}
	if st, err := w1.Client.Status(t.Context()); err != nil || st.State != "running" {
		t.Fatalf("w1 after the refused join --force: %+v, %v; want still running as a member", st, err)
	}
	for _, r := range alpha.Nodes(t) {
		if r.Name == "w1" && r.State != "active" {
			t.Fatalf("alpha records w1 %s after the refused join --force; want active", r.State)
		}
	}
}
