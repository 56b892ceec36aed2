//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The control-plane numbers issue 4 asks for (make bench).

// BenchmarkControlJoin: a control node's `meshctl join` to exit 0, which
// means caught up in raft and promoted to voter (join-ms).
func BenchmarkControlJoin(b *testing.B) {
	n := NewNet(b)
	origin := cluster(b, n)[0]
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		c := n.NewNode(fmt.Sprintf("c%d", i+2))
		c.Start(b)
		tok := origin.Admit(b, c.NodeName, "--role", "control")
		b.StartTimer()
		start := time.Now()
		c.MustCtl(b, "join", tok)
		took := time.Since(start)
		total += took
		if r := listedRaft(b, origin, c.NodeName); r != "voter" {
			b.Fatalf("%s is raft %q after its join returned", c.NodeName, r)
		}
		b.Logf("control join %d: %s (voters now %d)", i, took.Round(time.Millisecond), i+2)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "join-ms")
	Record(b, "join", "ms", ms(total/time.Duration(b.N)))
}

// BenchmarkAdmissionAfterLeaderLoss: from SIGKILL of the raft leader (not
// the CA holder) until `meshctl admit` succeeds on a survivor (resume-ms).
func BenchmarkAdmissionAfterLeaderLoss(b *testing.B) {
	n := NewNet(b)
	nodes := controlCluster(b, n)
	origin := nodes[0]
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		leader := waitLeader(b, origin)
		if leader == "origin" {
			origin.Stop(b) // hands leadership off
			origin.Start(b)
			leader = waitLeader(b, origin)
		}
		victim := byName(nodes, leader)
		var survivor *Node
		for _, c := range nodes[1:3] {
			if c != victim {
				survivor = c
			}
		}
		b.StartTimer()
		victim.Kill()
		start := time.Now()
		took := Eventually(b, 15*time.Second, "admission on a survivor", func() error {
			var r struct{ Token string }
			return survivor.CtlJSON(b.Context(), &r, "admit", fmt.Sprintf("r%d", i))
		})
		_ = took
		total += time.Since(start)
		b.StopTimer()
		b.Logf("iteration %d: killed %s, admission resumed after %s", i, victim.NodeName, time.Since(start).Round(time.Millisecond))
		victim.Start(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "resume-ms")
	Record(b, "resume", "ms", ms(total/time.Duration(b.N)))
}

func waitLeader(b *testing.B, nd *Node) string {
	var leader string
	Eventually(b, 15*time.Second, "a raft leader", func() error {
		if leader = leaderOf(b, nd); leader == "" {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	return leader
}

// BenchmarkAdmitLatency: `meshctl admit` end to end on the leader and on a
// follower (which forwards the write one hop), median of 15 each per
// iteration (leader-ms, follower-ms, ratio).
func BenchmarkAdmitLatency(b *testing.B) {
	n := NewNet(b)
	nodes := controlCluster(b, n)
	leaderName := waitLeader(b, nodes[0])
	leader := byName(nodes, leaderName)
	var follower *Node
	for _, c := range nodes[:3] {
		if c != leader {
			follower = c
			break
		}
	}
	median := func(nd *Node, tag string, i int) time.Duration {
		var ds []time.Duration
		for k := range 15 {
			start := time.Now()
			nd.Admit(b, fmt.Sprintf("%s%d-%d", tag, i, k))
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	var lsum, fsum time.Duration
	b.ResetTimer()
	for i := range b.N {
		lsum += median(leader, "l", i)
		fsum += median(follower, "f", i)
	}
	l := float64(lsum.Microseconds()) / 1000 / float64(b.N)
	f := float64(fsum.Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(l, "leader-ms")
	b.ReportMetric(f, "follower-ms")
	b.ReportMetric(f/l, "ratio")
	Record(b, "admit-leader", "ms", l)
	Record(b, "admit-follower", "ms", f)
}
