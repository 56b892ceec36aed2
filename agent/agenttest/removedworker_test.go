package agenttest_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// errorLines is how many lines of logs are errors, and how many of those
// carry code.
func errorLines(logs string, code codes.Code) (all, coded int) {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "level=ERROR") {
			all++
			if strings.Contains(l, string(code)) {
				coded++
			}
		}
	}
	return all, coded
}

// refusalsOf counts the control node's refusals of node as not a member.
func refusalsOf(logs, node string) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "refused a caller that is not a member") && strings.Contains(l, "node "+node+" ") {
			n++
		}
	}
	return n
}

// TestRemovedWorkerSaysSo (issue 52 item 9): a worker the cluster
// removed, running on, finds out from its watch stream: every control
// node refuses it NotMember. It stops answering names (its DNS refuses
// what it answered a moment before) and cuts its overlay off (no
// lighthouse, no peers), logs exactly one error with
// codes.RemovedByCluster, and `meshctl status` says "removed" with the
// code and the remedy. It asks the control nodes again only once its
// clock has moved a minute on (one round), and `meshctl leave` on it
// clears its state although the cluster refuses it. On main it said
// "running", answered names from its stale copy and asked every 5 s
// forever; its leave failed NotMember.
func TestRemovedWorkerSaysSo(t *testing.T) {
	clock := &agenttest.Clock{}
	c1 := agenttest.NewNode(t, "c1", clock)
	c1.Init(t, "alpha")
	w1 := agenttest.NewNode(t, "w1", clock)
	if _, err := w1.Join(t, c1.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatalf("join w1: %v", err)
	}
	dnsAddr := net.JoinHostPort(w1.IP, strconv.Itoa(agenttest.DNSPort))
	var c1IP string
	for _, r := range c1.Nodes(t) {
		if r.Name == "c1" {
			c1IP = r.OverlayIP
		}
	}
	agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
		if got := aOf(dnsAddr, "c1.alpha.mesh"); got != c1IP {
			return fmt.Errorf("w1 answers c1.alpha.mesh with %s, want %s", got, c1IP)
		}
		return nil
	})
	if all, _ := errorLines(w1.Logs(), codes.RemovedByCluster); all != 0 {
		t.Fatalf("w1 logged %d errors before its removal:\n%s", all, w1.Logs())
	}

	if err := c1.Client.Remove(t.Context(), "w1"); err != nil {
		t.Fatalf("remove w1: %v", err)
	}
	removed := time.Now()
	var st *apitype.Status
	agenttest.WaitFor(t, t.Context(), 20*time.Second, func() error {
		var err error
		if st, err = w1.Client.Status(t.Context()); err != nil {
			return err
		}
		if st.State != apitype.StateRemoved {
			return fmt.Errorf("w1 says %q, want %q", st.State, apitype.StateRemoved)
		}
		return nil
	})
	if st.Error == nil || st.Error.ErrCode != codes.RemovedByCluster || st.Error.Remedy == "" || st.Removed == nil {
		t.Fatalf("w1's status says removed without the code and remedy: %+v", st)
	}
	t.Logf("w1 says removed %s after `remove` returned (%s)", time.Since(removed).Round(time.Millisecond), st.Error.Detail)
	agenttest.WaitFor(t, t.Context(), 5*time.Second, func() error {
		if got := aOf(dnsAddr, "c1.alpha.mesh"); got != "REFUSED" {
			return fmt.Errorf("w1 still answers c1.alpha.mesh: %s", got)
		}
		if s, err := w1.Client.Status(t.Context()); err != nil || s.Overlay == nil || len(s.Overlay.Lighthouses) != 0 || s.Overlay.StaticHosts != 0 {
			return fmt.Errorf("w1's overlay is not cut off: %+v (%v)", s.Overlay, err)
		}
		return nil
	})
	if all, coded := errorLines(w1.Logs(), codes.RemovedByCluster); all != 1 || coded != 1 {
		t.Fatalf("w1 logged %d errors, %d with %s; want exactly one, with the code:\n%s", all, coded, codes.RemovedByCluster, w1.Logs())
	}

	// Its retries: none until its clock moved a minute on, then one
	// round (c1, its only control node, once).
	refused := refusalsOf(c1.Logs(), "w1")
	if st.Removed.Asks != 0 {
		t.Fatalf("w1 asked %d times right after its removal", st.Removed.Asks)
	}
	clock.Advance(time.Minute + time.Second)
	agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
		s, err := w1.Client.Status(t.Context())
		if err != nil || s.Removed == nil || s.Removed.Asks != 1 {
			return fmt.Errorf("w1 has not asked again a minute later: %+v (%v)", s.Removed, err)
		}
		return nil
	})
	agenttest.WaitFor(t, t.Context(), 5*time.Second, func() error {
		if got := refusalsOf(c1.Logs(), "w1"); got != refused+1 {
			return fmt.Errorf("c1 refused w1 %d times since, want 1 (one round)", got-refused)
		}
		return nil
	})

	// `meshctl leave` clears its state although the cluster refuses it.
	if err := w1.Client.Leave(t.Context()); err != nil {
		t.Fatalf("leave on a removed worker: %v", err)
	}
	if s, err := w1.Client.Status(t.Context()); err != nil || s.State != "unjoined" {
		t.Fatalf("w1 after leave: %+v (%v)", s, err)
	}
	if _, err := os.Stat(filepath.Join(w1.Dir, "node.json")); !os.IsNotExist(err) {
		t.Fatalf("w1 kept its node.json: %v", err)
	}
	if got := refusalsOf(c1.Logs(), "w1"); got != refused+1 {
		t.Fatalf("c1 refused w1 %d times since its last round, want none until the next minute", got-refused-1)
	}
	if all, _ := errorLines(w1.Logs(), codes.RemovedByCluster); all != 1 {
		t.Fatalf("w1 logged %d errors in all, want 1:\n%s", all, w1.Logs())
	}
}

// TestRemovedControlNodeSaysSo (issue 52 item 9): a control node removed
// from raft hears from no leader again, and its FSM never learns of its
// removal (the leader drops it from raft first). It asks its peer whether
// it still counts it a member, is refused NotMember, and says so: status
// "removed" with the code, names refused, one error; `meshctl leave`
// then clears it at once (on main it waited on a leader for 30 s and
// failed).
func TestRemovedControlNodeSaysSo(t *testing.T) {
	clock := &agenttest.Clock{}
	quick := func(c *config.File) { c.ReconcileInterval = 200 * time.Millisecond }
	c1 := agenttest.NewNodeAt(t, "c1", agenttest.TakeIP(t), clock, quick)
	c1.Init(t, "alpha")
	c2 := agenttest.NewNodeAt(t, "c2", agenttest.TakeIP(t), clock, quick)
	if _, err := c2.Join(t, c1.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})); err != nil {
		t.Fatalf("join c2: %v", err)
	}
	dnsAddr := net.JoinHostPort(c2.IP, strconv.Itoa(agenttest.DNSPort))
	agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
		if got := aOf(dnsAddr, "c1.alpha.mesh"); strings.Count(got, ".") != 3 {
			return fmt.Errorf("c2 answers c1.alpha.mesh with %s", got)
		}
		return nil
	})
	if err := c1.Client.Remove(t.Context(), "c2"); err != nil {
		t.Fatalf("remove c2: %v", err)
	}
	removed := time.Now()
	agenttest.WaitFor(t, t.Context(), 20*time.Second, func() error {
		st, err := c2.Client.Status(t.Context())
		if err != nil {
			return err
		}
		if st.State != apitype.StateRemoved || st.Error == nil || st.Error.ErrCode != codes.RemovedByCluster {
			return fmt.Errorf("c2 says %q (%+v), want %q with %s", st.State, st.Error, apitype.StateRemoved, codes.RemovedByCluster)
		}
		if got := aOf(dnsAddr, "c1.alpha.mesh"); got != "REFUSED" {
			return fmt.Errorf("c2 still answers c1.alpha.mesh: %s", got)
		}
		return nil
	})
	t.Logf("c2 says removed and refuses names %s after `remove` returned", time.Since(removed).Round(time.Millisecond))
	if all, coded := errorLines(c2.Logs(), codes.RemovedByCluster); coded != 1 {
		t.Fatalf("c2 logged %d errors, %d with %s; want exactly one with the code:\n%s", all, coded, codes.RemovedByCluster, c2.Logs())
	}
	if err := c2.Client.Leave(t.Context()); err != nil {
		t.Fatalf("leave on a removed control node: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c2.Dir, "node.json")); !os.IsNotExist(err) {
		t.Fatalf("c2 kept its node.json: %v", err)
	}
}
