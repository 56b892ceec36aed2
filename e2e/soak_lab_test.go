//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestSoakLab is the soak's NAT lab variant (`make soak LAB=1
// DURATION=10m`, issue 29): the sites of TestSites (c1, c2 on site A, c3
// on site B, 50 ms apart one way) with 10 workers behind NAT, 5 on site
// A (port-preserving) and 5 on site B (symmetric: every path from there
// to site A goes through a control node's relay). The cluster forms,
// every pair of its 13 nodes pings over the overlay, and for
// MESHD_SOAK_DURATION every node's gossip shows every node alive (read
// every 5 s) with no raft leader change; at the end every pair pings
// again. Skipped without MESHD_SOAK_DURATION, like TestSoak.
//
// The timers are meshd's defaults (lan), what operators run;
// MESHD_SOAK_TIMERS=fast (make soak LAB=1 TIMERS=fast) runs the suite's.
// Fast timers do not hold this lab: their 200 ms probe round against the
// 100 ms round trip across the sites (a relayed pair's more) suspected
// 693 times in 10 minutes and failed b4 once (b5's view, 1m20s in) on an
// idle machine, 2026-12-03; docs/performance.md, "Sites".
func TestSoakLab(t *testing.T) {
	env := os.Getenv("MESHD_SOAK_DURATION")
	if env == "" {
		t.Skip("the lab soak runs with `make soak LAB=1 DURATION=10m` (MESHD_SOAK_DURATION)")
	}
	dur, err := time.ParseDuration(env)
	if err != nil {
		t.Fatalf("MESHD_SOAK_DURATION=%q: %v", env, err)
	}
	timers := cmp.Or(os.Getenv("MESHD_SOAK_TIMERS"), "lan")
	start := time.Now()
	l := newSitesLab(t, timers, NATPortPreserving, NATSymmetric)
	nodes := l.All()
	for i := range 4 {
		for _, s := range []struct {
			site *Site
			on   *Node
		}{{l.A, l.Control[1]}, {l.B, l.Control[2]}} {
			w := s.site.NewNode(fmt.Sprintf("%s%d", s.site.Name, i+2))
			w.Start(t)
			w.MustCtl(t, "join", s.on.Admit(t, w.NodeName))
			nodes = append(nodes, w)
		}
	}
	names := make([]string, len(nodes))
	for i, nd := range nodes {
		names[i] = nd.NodeName
	}
	Eventually(t, 60*time.Second, "gossip on every node shows every node alive", func() error {
		return allAlive(t, nodes, names...)
	})
	formed := time.Since(start)
	allPairsPing(t, nodes, 10*time.Second)
	t.Logf("lab soak, timers %s: %d nodes (10 workers behind NAT) formed in %s, every pair pinged after %s",
		timers, len(nodes), formed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	mark := logMark(t, nodes)
	watch := watchLeader(t, l.Control)
	notAlive := 0
	for end := time.Now().Add(dur); time.Now().Before(end); time.Sleep(5 * time.Second) {
		if err := allAlive(t, nodes, names...); err != nil {
			notAlive++
			t.Errorf("at %s: %v", time.Since(watch.start).Round(time.Second), err)
		}
	}
	flaps, report := watch.Stop()
	sus := suspicionsSince(t, mark)
	t.Logf("lab soak over %s: %s; %d suspicion lines; %d readings not all alive", dur, report, len(sus), notAlive)
	if flaps > 0 {
		t.Errorf("leader flapped: %s", report)
	}
	if len(sus) > 0 {
		t.Errorf("%d false suspicions: %v", len(sus), sus)
	}
	allPairsPing(t, nodes, 10*time.Second)
	t.Logf("lab soak: done in %s", time.Since(start).Round(time.Second))
}
