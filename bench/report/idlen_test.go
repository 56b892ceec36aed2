package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/bench/benchrec"
)

// TestIdleAgainstN: BenchmarkIdleAgainstN's figures are rows of the whole
// table per size, its ratios are held to 1.2×, and both plots against N
// are drawn; with none of its records, the plots say not measured.
func TestIdleAgainstN(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "r.jsonl")
	now := time.Now()
	add := func(metric, unit string, v float64, params map[string]string, samples ...float64) {
		params["timers"] = "lan"
		r := benchrec.Result{Name: idleNBench, Metric: metric, Unit: unit, Value: v, Samples: samples, Params: params, Time: now}
		if err := benchrec.AddTo(in, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []struct {
		n        string
		cpu, wkp float64
	}{{"10", 0.6, 280}, {"25", 0.8, 330}, {"50", 1.1, 400}} {
		add("idle-cpu-worker", "%", n.cpu, map[string]string{"n": n.n}, n.cpu-0.1, n.cpu+0.2)
		add("idle-wakeups-worker", "/s", n.wkp, map[string]string{"n": n.n}, n.wkp-20, n.wkp+30)
		add("idle-cpu-control", "%", 2*n.cpu, map[string]string{"n": n.n})
		add("idle-wakeups-control", "/s", 2*n.wkp, map[string]string{"n": n.n})
		add("idle-cpu-leader", "%", 3*n.cpu, map[string]string{"n": n.n})
		add("joined", "count", 10, map[string]string{"n": n.n})
	}
	add("idle-cpu-worker-ratio", "x", 1.1/0.6, map[string]string{"sizes": "50/10"})
	add("idle-wakeups-worker-ratio", "x", 1.15, map[string]string{"sizes": "50/10"})
	doc := filepath.Join(dir, "perf.md")
	if err := os.WriteFile(doc, []byte(beginMarker+"\n"+endMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plots := filepath.Join(dir, "plots")
	if err := run(in, nil, doc, plots); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(doc)
	page := string(raw)
	for _, want := range []string{
		"| idle CPU per worker, mean over the workers, N nodes (lan timers, default raft) | `BenchmarkIdleAgainstN` (n=10, timers=lan) | **0.60%** (0.50%–0.80%, 2 samples) |",
		"| idle CPU per worker, mean over the workers, N nodes (lan timers, default raft) | `BenchmarkIdleAgainstN` (n=50, timers=lan) | **1.10%**",
		"| idle wakeups per control node, mean over the 3 | `BenchmarkIdleAgainstN` (n=25, timers=lan) | **660/s** |",
		"| idle CPU per worker, 50 nodes over 10 | `BenchmarkIdleAgainstN` (sizes=50/10, timers=lan) | **1.83** | ≤ 1.2 | **missed** |",
		"| idle wakeups per worker, 50 nodes over 10 | `BenchmarkIdleAgainstN` (sizes=50/10, timers=lan) | **1.15** | ≤ 1.2 | met |",
		"| idle CPU per control node, 50 nodes over 10 | `BenchmarkIdleAgainstN` | not measured in this run | ≤ 1.2 | |",
		"| idle against N: nodes joined (n when all joins succeeded) | `BenchmarkIdleAgainstN` (n=50, timers=lan) | **10** | n | **missed** |",
		"](plots/idle-cpu-vs-n.png)", "](plots/idle-wakeups-vs-n.png)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	for _, f := range []string{"idle-cpu-vs-n.png", "idle-wakeups-vs-n.png"} {
		if st, err := os.Stat(filepath.Join(plots, f)); err != nil || st.Size() < 1000 {
			t.Errorf("plot %s: %v", f, err)
		}
	}

	// Without the benchmark's records: the plots are titled not measured.
	_, fig, err := idleCPUPlot(newResults(nil))
	if err != nil || !strings.Contains(fig.caption, absent) {
		t.Errorf("empty idle plot: caption %q, err %v", fig.caption, err)
	}
}
