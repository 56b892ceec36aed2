package gossip

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestFailureDetected(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b", "c")
	marks := []int{nodes[0].mark(), nodes[1].mark()}
	if err := nodes[2].g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var worst time.Duration
	for i, n := range nodes[:2] {
		d := n.await(t, marks[i], EventFailed, "c").Sub(stopped)
		t.Logf("%s detected c failed after %v", n.cfg.Name, d)
		worst = max(worst, d)
	}
	t.Logf("failure detection (Fast timers): %v", worst)
	if worst > 2*time.Second {
		t.Errorf("failure detection took %v, want < 2s with Fast timers", worst)
	}
	for _, m := range nodes[0].g.Members() {
		if m.Name == "c" && m.Status != StatusFailed {
			t.Errorf("a sees c %s, want failed", m.Status)
		}
	}
}

// BenchmarkFailureDetection measures, with Fast timers, how long a 3-node
// cluster takes to see a member that stops without leaving as failed, and
// how long a join takes to reach every member. Each iteration starts a new
// third node on a fresh address, joins it, shuts it down and waits until
// both others raise EventFailed.
//
// Metrics: detect-ms (mean time from Shutdown returning to the last
// survivor's failed event), detect-max-ms, and join-ms (mean time from the
// Join call to the last member's join event). Run with
//
//	go test -run '^$' -bench FailureDetection -benchtime 10x ./gossip/
func BenchmarkFailureDetection(b *testing.B) {
	key := newKey(b)
	stable, _ := cluster(b, key, "a", "b")
	var detect, join []time.Duration
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("victim-%d", i)
		i++
		victim := start(b, testConfig(b, name, key))

		marks := []int{stable[0].mark(), stable[1].mark()}
		t0 := time.Now()
		if _, err := victim.g.Join(b.Context(), []string{stable[0].addr()}); err != nil {
			b.Fatal(err)
		}
		var last time.Time
		for j, n := range stable {
			last = latest(last, n.await(b, marks[j], EventJoin, name))
		}
		join = append(join, last.Sub(t0))

		marks = []int{stable[0].mark(), stable[1].mark()}
		if err := victim.g.Shutdown(); err != nil {
			b.Fatal(err)
		}
		stopped := time.Now()
		last = time.Time{}
		for j, n := range stable {
			last = latest(last, n.await(b, marks[j], EventFailed, name))
		}
		detect = append(detect, last.Sub(stopped))
	}
	b.ReportMetric(ms(mean(detect)), "detect-ms")
	b.ReportMetric(ms(slices.Max(detect)), "detect-max-ms")
	b.ReportMetric(ms(mean(join)), "join-ms")
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
