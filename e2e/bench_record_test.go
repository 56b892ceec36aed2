//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/bench/benchrec"
)

// How benchmarks record their results as data (make bench).
//
// `make bench` sets MESHD_BENCH_OUT=build/bench/results.jsonl; every call
// below appends one JSON line to it (package bench/benchrec documents the
// format), and bench/report turns the file into docs/performance.md's
// tables and docs/plots/*.png. With MESHD_BENCH_OUT unset the calls do
// nothing, so a benchmark run by hand is unchanged.
//
// The API (stable; other benchmarks in this package call it):
//
//	Record(tb, "join", "ms", 37.5)                    // one figure
//	Record(tb, "join", "ms", p50, samples...)         // with every observation
//	RecordWith(tb, map[string]string{"n": "100"}, "formation", "s", 12.3)
//	ms(d) / msOf(ds)                                  // durations to float64 ms
//
// The record's name is the top-level test or benchmark name (tb.Name() up
// to the first '/'); each later segment of tb.Name() becomes a parameter:
// "k=v" segments as k → v (BenchmarkFailureDetection/timers=fast/delay=0s
// gives timers=fast, delay=0s), others as "run" (TestJoinBurst50/round2
// gives run=round2). RecordWith adds parameters of its own. Every record
// says which meshd timers it ran with (parameter timers): a record whose
// name and parameters do not say gets the suite's default, suiteTimers
// (what NewNode writes unless Net.Timers says otherwise), so a benchmark
// that runs other timers names them, in a sub-benchmark
// ("timers=lan") or its parameters. Metric names
// are what the figure is, without the unit ("join", "detect", "rss-worker");
// the unit is one of ms, µs, s, MB, KiB, %, Mbit/s, s/GB (CPU-seconds per
// GB moved), /s (a rate), count, x (a ratio).
//
// bench/report knows these names (see its figures table); a new metric
// still lands in the page's table of everything recorded, so recording
// first and plotting later is fine.

// Record appends one result of the running test or benchmark.
func Record(tb testing.TB, metric, unit string, value float64, samples ...float64) {
	tb.Helper()
	RecordWith(tb, nil, metric, unit, value, samples...)
}

// RecordWith is Record with parameters of its own (added to those taken
// from tb.Name()).
func RecordWith(tb testing.TB, params map[string]string, metric, unit string, value float64, samples ...float64) {
	tb.Helper()
	name, ps := splitBenchName(tb.Name())
	maps.Copy(ps, params)
	if ps["timers"] == "" {
		ps["timers"] = suiteTimers
	}
	r := benchrec.Result{Name: name, Metric: metric, Unit: unit, Value: value, Samples: samples, Params: ps}
	if err := benchrec.Add(r); err != nil {
		tb.Errorf("record %s %s: %v", name, metric, err)
	}
}

// splitBenchName splits "BenchmarkX/k=v/sub" into "BenchmarkX" and
// {k: v, run: sub}.
func splitBenchName(full string) (string, map[string]string) {
	segs := strings.Split(full, "/")
	ps := map[string]string{}
	for _, s := range segs[1:] {
		if k, v, ok := strings.Cut(s, "="); ok {
			ps[k] = v
		} else if ps["run"] == "" {
			ps["run"] = s
		} else {
			ps["run"] += "/" + s
		}
	}
	return segs[0], ps
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// msOf is each of ds in milliseconds.
func msOf(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

// recordBurst records one burst of concurrent joins (TestJoinBurst50 calls
// it where it prints its figures) on nodes with the given timers: every
// join's latency as samples (the value is the median), the first start to
// the last exit, and how many joins failed.
func recordBurst(tb testing.TB, timers string, joins []*burstJoin) {
	tb.Helper()
	ds := make([]time.Duration, len(joins))
	failed := 0
	for i, j := range joins {
		ds[i] = j.took()
		if j.code != 0 {
			failed++
		}
	}
	s := statsOf(joins)
	n := map[string]string{"joins": fmt.Sprint(len(joins)), "timers": timers}
	RecordWith(tb, n, "join", "ms", ms(s.p50), msOf(ds)...)
	RecordWith(tb, n, "join-p90", "ms", ms(s.p90))
	RecordWith(tb, n, "join-max", "ms", ms(s.max))
	RecordWith(tb, n, "total", "ms", ms(s.total))
	RecordWith(tb, n, "failed", "count", float64(failed))
}

// recordSettle records how long after a burst's last exit the slowest
// control node listed every worker alive (checkBurst's result).
func recordSettle(tb testing.TB, timers string, joins []*burstJoin, d time.Duration) {
	tb.Helper()
	RecordWith(tb, map[string]string{"joins": fmt.Sprint(len(joins)), "timers": timers}, "settle", "ms", ms(d))
}
