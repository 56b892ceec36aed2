//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// quorumView is nd's status: its quorum and the codes of its warnings.
func quorumView(t testing.TB, nd *Node) (*apitype.Quorum, []codes.Code, error) {
	var st apitype.Status
	if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil {
		return nil, nil, err
	}
	var ws []codes.Code
	for _, w := range st.Warnings {
		ws = append(ws, w.Code)
	}
	if st.Quorum == nil {
		return nil, ws, fmt.Errorf("%s: status has no quorum", nd.NodeName)
	}
	return st.Quorum, ws, nil
}

// TestStatusQuorumHealth: on three control nodes `meshctl status` shows
// the leader and 3 of 3 voters reachable, no warning; with one stopped, the
// others warn QuorumAtRisk naming it (one more loss costs the quorum);
// with two stopped, the last one warns NoLeaderWarning and shows no leader.
// Their metrics show one raft leader and followers in contact with it.
func TestStatusQuorumHealth(t *testing.T) {
	n := NewNet(t)
	n.ExtraConfig = "metrics_addr: 127.0.0.1:9464\n" // each namespace has its own loopback
	nodes := controlCluster(t, n)
	origin, c2, c3 := nodes[0], nodes[1], nodes[2]
	Eventually(t, 10*time.Second, "3 of 3 voters reachable, no warning, on every control node", func() error {
		for _, nd := range nodes {
			q, ws, err := quorumView(t, nd)
			if err != nil {
				return err
			}
			if q.Leader == "" || q.Reachable != 3 || len(q.Voters) != 3 || q.Needed != 2 || len(ws) != 0 {
				return fmt.Errorf("%s: %+v, warnings %v", nd.NodeName, *q, ws)
			}
		}
		return nil
	})

	// Raft's series on three control nodes: one leader, followers in
	// contact with it, the writes that formed the cluster timed (by whoever
	// led them).
	leaders, applies := 0.0, 0.0
	for _, nd := range nodes {
		m, err := scrape(t.Context(), nd, "127.0.0.1:9464")
		if err != nil {
			t.Fatal(err)
		}
		leaders += m["meshd_raft_leader"]
		if m["meshd_raft_voters"] != 3 {
			t.Errorf("%s: meshd_raft_voters %v", nd.NodeName, m["meshd_raft_voters"])
		}
		lc, follower := m["meshd_raft_last_contact_seconds"]
		if follower == (m["meshd_raft_leader"] == 1) || (follower && (lc < 0 || lc > 1)) {
			t.Errorf("%s: leader %v, last contact %v (present %v)", nd.NodeName, m["meshd_raft_leader"], lc, follower)
		}
		applies += m["meshd_raft_apply_duration_seconds_count"]
	}
	if applies < 3 { // the admissions and joins of c2 and c3 at least
		t.Errorf("%v raft writes timed", applies)
	}
	if leaders != 1 {
		t.Errorf("%v nodes report meshd_raft_leader 1", leaders)
	}

	c3.Stop(t)
	start := time.Now()
	for _, nd := range []*Node{origin, c2} {
		Eventually(t, 10*time.Second, nd.NodeName+" warns QuorumAtRisk", func() error {
			q, ws, err := quorumView(t, nd)
			if err != nil {
				return err
			}
			if q.Leader == "" || q.Reachable != 2 || !slices.Equal(ws, []codes.Code{codes.QuorumAtRisk}) {
				return fmt.Errorf("%+v, warnings %v", *q, ws)
			}
			for _, v := range q.Voters {
				if (v.Name == "c3") == v.Reachable {
					return fmt.Errorf("voter %+v", v)
				}
			}
			return nil
		})
	}
	t.Logf("QuorumAtRisk shown %s after c3 stopped", time.Since(start).Round(time.Millisecond))
	// The text form: the warning with its code on stderr, exit 0.
	out, errs, code := origin.Ctl(t.Context(), "status")
	if code != 0 || !strings.Contains(errs, "warning "+string(codes.QuorumAtRisk)+": ") ||
		!strings.Contains(out, "2 of 3 voters reachable, 2 needed") || !strings.Contains(out, "unreachable") {
		t.Fatalf("meshctl status: exit %d\n%s%s", code, out, errs)
	}

	c2.Stop(t)
	start = time.Now()
	Eventually(t, 15*time.Second, "origin warns NoLeaderWarning", func() error {
		q, ws, err := quorumView(t, origin)
		if err != nil {
			return err
		}
		if q.Leader != "" || q.Reachable != 1 || !slices.Contains(ws, codes.NoLeaderWarning) {
			return fmt.Errorf("%+v, warnings %v", *q, ws)
		}
		return nil
	})
	t.Logf("NoLeaderWarning shown %s after c2 stopped", time.Since(start).Round(time.Millisecond))
	out, errs, code = origin.Ctl(t.Context(), "status")
	if code != 0 || !strings.Contains(errs, "warning "+string(codes.NoLeaderWarning)+": ") || !regexp.MustCompile(`leader:\s+none\n`).MatchString(out) {
		t.Fatalf("meshctl status: exit %d\n%s%s", code, out, errs)
	}
}
