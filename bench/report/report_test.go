package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/bench/benchrec"
)

// TestRun: the generated part replaces what lay between the markers and
// nothing else; present figures are shown with their verdict, absent ones
// as not measured; a ratio lists its rounds; the five plots are written;
// b.ReportMetric figures are taken from `go test -bench` output, but not
// for a benchmark that records.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "r.jsonl")
	now := time.Now()
	for _, r := range []benchrec.Result{
		{Name: "TestJoinBurst50", Metric: "total", Unit: "ms", Value: 12000, Params: map[string]string{"joins": "50", "run": "round1"}, Time: now},
		{Name: "TestJoinBurst50", Metric: "join", Unit: "ms", Value: 900, Samples: []float64{500, 900, 1500}, Params: map[string]string{"joins": "50", "run": "round1"}, Time: now},
		{Name: "TestJoinBurst50", Metric: "total", Unit: "ms", Value: 7000, Params: map[string]string{"joins": "50", "run": "round1", "timers": "lan"}, Time: now},
		{Name: "TestJoinBurst50", Metric: "failed", Unit: "count", Value: 1, Params: map[string]string{"joins": "50", "run": "round1", "timers": "lan"}, Time: now},
		{Name: "BenchmarkRemovalGossip", Metric: "gone", Unit: "ms", Value: 40, Samples: []float64{10, 40}, Params: map[string]string{"timers": "lan"}, Time: now},
		{Name: "BenchmarkRemovalGossip", Metric: "gone", Unit: "ms", Value: 2500, Params: map[string]string{"timers": "fast"}, Time: now},
		{Name: "BenchmarkFailureDetection", Metric: "detect", Unit: "ms", Value: 800, Samples: []float64{700, 900}, Params: map[string]string{"timers": "fast", "delay": "25ms"}, Time: now},
		{Name: "TestFormation", Metric: "formation", Unit: "s", Value: 41, Params: map[string]string{"n": "100", "batch": "10"}, Time: now},
		{Name: "TestFormation", Metric: "extra", Unit: "count", Value: 3, Time: now},
		{Name: "BenchmarkOverlayThroughput", Metric: "installed-tcp-ratio", Unit: "x", Value: 0.97, Samples: []float64{0.91, 0.97, 1.02, 0.95, 1.04}, Time: now},
		{Name: "BenchmarkOverlayThroughput", Metric: "harness-tcp-ratio", Unit: "x", Value: 0.92, Samples: []float64{0.92, 0.90, 0.94, 0.91, 0.93}, Time: now},
		{Name: "BenchmarkOverlayThroughput", Metric: "installed", Unit: "Mbit/s", Value: 900, Samples: []float64{850, 900, 950, 880, 910}, Time: now},
		{Name: "BenchmarkOverlayThroughput", Metric: "baseline", Unit: "Mbit/s", Value: 920, Samples: []float64{930, 920, 910, 925, 880}, Time: now},
		{Name: "BenchmarkDNSAnswer", Metric: "answer-p99", Unit: "µs", Value: 212, Params: map[string]string{"timers": "fast"}, Time: now},
	} {
		if err := benchrec.AddTo(in, r); err != nil {
			t.Fatal(err)
		}
	}
	gotest := filepath.Join(dir, "gossip.txt")
	if err := os.WriteFile(gotest, []byte("goos: linux\nBenchmarkGossipSim/timers=fast/members=100-2 \t 1\t 2051234 ns/op\t 156.0 join-all-ms\t 742.0 heap-KiB/member\n"+
		"BenchmarkOverlayThroughput-2 \t 3\t 1 ns/op\t 8888 installed-Mbps\t 0.123 installed-tcp-ratio\n"+
		"BenchmarkFailureDetection/timers=fast/delay=25ms-2 \t 3\t 1 ns/op\t 9999 detect-ms\nPASS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := filepath.Join(dir, "names.txt") // -cpu 1: no -N after the name
	if err := os.WriteFile(names, []byte("BenchmarkServeLatency    \t   20000\t     51234 ns/op\t        48.00 p50-µs\t      1210 p99-µs\n"+
		"BenchmarkServeThroughput \t   20000\t      9012 ns/op\t    110960 queries/s\nPASS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "perf.md")
	if err := os.WriteFile(doc, []byte("# top prose\n\n"+beginMarker+"\nstale\n"+endMarker+"\n\nbottom prose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plots := filepath.Join(dir, "plots")
	if err := run(in, []string{gotest, names, filepath.Join(dir, "absent.txt")}, doc, plots); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(doc)
	page := string(raw)
	for _, want := range []string{
		"# top prose\n\n" + beginMarker + "\n", endMarker + "\n\nbottom prose\n",
		"| 50 joins at once: first start to last exit | `TestJoinBurst50` (joins=50, run=round1) | **12.00 s** | ≤ 10 s | **missed** |",
		"`BenchmarkFailureDetection` (delay=25ms, timers=fast) | **800 ms** (700 ms–900 ms, 2 samples) | < 2 s | met |",
		"| 50 joins at once: first start to last exit | `TestJoinBurst50` (joins=50, run=round1, timers=lan) | **7.00 s** | ≤ 10 s | met |",
		"| 50 joins at once: joins not confirmed | `TestJoinBurst50` (joins=50, run=round1, timers=lan) | **1** | 0 | **missed** |",
		"`BenchmarkRemovalGossip` (timers=fast) | **2.50 s** | ≤ 2 s | **missed** |",
		"`BenchmarkRemovalGossip` (timers=lan) | **40 ms** (10 ms–40 ms, 2 samples) | ≤ 2 s | met |",
		"| killed worker seen failed, `timers: lan` (default) | `BenchmarkFailureDetection` | not measured in this run |",
		"| worker `meshctl join`, start to exit 0 | `BenchmarkJoin` | not measured in this run |",
		"`BenchmarkGossipSim` (members=100, timers=fast) | **156 ms** | ≤ 5 s | met |",
		"**742.0 KiB**",
		"| overlay TCP throughput, meshd as installed / Nebula alone, median of the rounds' ratios | `BenchmarkOverlayThroughput` | **0.97** (0.91–1.04; rounds: 0.91, 0.97, 1.02, 0.95, 1.04) | ≥ 1.0 (parity within the rounds' noise) | met (95% interval of the median 0.92–1.02) |",
		"| overlay TCP throughput, meshd in the e2e harness / Nebula alone, median of the rounds' ratios | `BenchmarkOverlayThroughput` | **0.92** (0.90–0.94; rounds: 0.92, 0.90, 0.94, 0.91, 0.93) | ≥ 1.0 (parity within the rounds' noise) | **missed** (95% interval of the median 0.91–0.93) |",
		"| overlay RTT, meshd as installed / Nebula alone, median of the rounds' ratios | `BenchmarkOverlayThroughput` | not measured in this run | ≤ 1.1 | |",
		"| overlay TCP throughput, meshd as installed (packaged meshd.yaml) | `BenchmarkOverlayThroughput` | **900.0 Mbit/s** (850.0 Mbit/s–950.0 Mbit/s, 5 samples) |  |  |",
		"](plots/overlay-ratio.png)",
		"](plots/formation.png)",
		"| `TestFormation` |  | extra | **3** |",
		"| DNS answer from a real meshd's loopback address, inside its namespace, p99 | `BenchmarkDNSAnswer` (timers=fast) | **212 µs** | < 1 ms | met |",
		"| DNS answer from a real meshd's loopback address, inside its namespace, p50 | `BenchmarkDNSAnswer` | not measured in this run |",
		"| DNS answer, names server alone, one core, 1000-host zone, p50 | `BenchmarkServeLatency` | **48 µs** |  |  |",
		"| DNS answer, names server alone, one core, 1000-host zone, p99 | `BenchmarkServeLatency` | **1210 µs** | < 1 ms | **missed** |",
		"| DNS queries answered per second, names server alone, one core, 8 clients | `BenchmarkServeThroughput` | **110960/s** |  |  |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "9999") || strings.Contains(page, "10.00 s") || strings.Contains(page, "8888") || strings.Contains(page, "0.12") {
		t.Error("a benchmark that records was also read from its go test output")
	}
	if strings.Contains(page, "stale") {
		t.Error("the old generated part was kept")
	}
	for _, f := range []string{"join-latency.png", "formation.png", "detection.png", "throughput.png", "overlay-ratio.png"} {
		if st, err := os.Stat(filepath.Join(plots, f)); err != nil || st.Size() < 1000 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
}

// TestNoMarkers: a page without the markers is refused, not overwritten.
func TestNoMarkers(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "p.md")
	if err := os.WriteFile(doc, []byte("prose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceGenerated(doc, "x"); err == nil {
		t.Fatal("no error")
	}
	if raw, _ := os.ReadFile(doc); string(raw) != "prose\n" {
		t.Fatalf("page changed: %q", raw)
	}
}

// TestSplitUnit: a b.ReportMetric unit's metric and unit, the names
// package's µs and rate among them, the others as they were.
func TestSplitUnit(t *testing.T) {
	for _, c := range []struct{ in, metric, unit string }{
		{"join-all-ms", "join-all", "ms"},
		{"p99-µs", "p99", "µs"},
		{"formation-s", "formation", "s"},
		{"meshd-Mbps", "meshd", "Mbit/s"},
		{"wireguard-go-p4-cpu-per-gb-s/GB", "wireguard-go-p4-cpu-per-gb", "s/GB"},
		{"queries/s", "queries", "/s"},
		{"direct-Mbit/s", "direct-Mbit/s", "count"},
		{"heap-KiB/member", "heap-KiB/member", "KiB"},
		{"idle-cpu-%/member", "idle-cpu-%/member", "%"},
		{"ratio", "ratio", "count"},
	} {
		if m, u := splitUnit(c.in); m != c.metric || u != c.unit {
			t.Errorf("splitUnit(%q) = %q, %q; want %q, %q", c.in, m, u, c.metric, c.unit)
		}
	}
}
