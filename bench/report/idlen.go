package main

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Issue 54 item 7 (a): e2e.BenchmarkIdleAgainstN's idle cost per worker
// and per control node against N, its rows and its two plots.

const idleNBench = "BenchmarkIdleAgainstN"

// idleTarget is issue 54's bound: the 50-node figure at most 1.2 times
// the 10-node one, for a worker and for a control node.
const idleTarget = 1.2

// idleNRows are the benchmark's rows of the whole table: per size (its
// records' n), then the ratios the benchmark took of 50 over 10.
var idleNRows = []row{
	{what: "idle against N: nodes joined (n when all joins succeeded)", name: idleNBench, metric: "joined", target: "n", okN: true},
	{what: "idle against N: nodes seeing all n alive before the settle", name: idleNBench, metric: "seeing-all", target: "n", okN: true},
	{what: "idle CPU per worker, mean over the workers, N nodes (lan timers, default raft)", name: idleNBench, metric: "idle-cpu-worker"},
	{what: "idle CPU per worker, the busiest worker", name: idleNBench, metric: "idle-cpu-worker-max"},
	{what: "idle wakeups per worker, mean over the workers", name: idleNBench, metric: "idle-wakeups-worker"},
	{what: "idle CPU per control node, mean over the 3", name: idleNBench, metric: "idle-cpu-control"},
	{what: "idle CPU of the raft leader", name: idleNBench, metric: "idle-cpu-leader"},
	{what: "idle wakeups per control node, mean over the 3", name: idleNBench, metric: "idle-wakeups-control"},
	{what: "idle wakeups of the raft leader", name: idleNBench, metric: "idle-wakeups-leader"},
	{what: "idle CPU per worker, 50 nodes over 10", name: idleNBench, metric: "idle-cpu-worker-ratio", target: "≤ 1.2", ok: le(idleTarget)},
	{what: "idle wakeups per worker, 50 nodes over 10", name: idleNBench, metric: "idle-wakeups-worker-ratio", target: "≤ 1.2", ok: le(idleTarget)},
	{what: "idle CPU per control node, 50 nodes over 10", name: idleNBench, metric: "idle-cpu-control-ratio", target: "≤ 1.2", ok: le(idleTarget)},
	{what: "idle wakeups per control node, 50 nodes over 10", name: idleNBench, metric: "idle-wakeups-control-ratio", target: "≤ 1.2", ok: le(idleTarget)},
}

func idleCPUPlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "Idle CPU per node vs cluster size", file: "idle-cpu-vs-n.png"}
	return idleNPlot(s, fig, "cpu", "% of one core")
}

func idleWakeupsPlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "Idle wakeups per node vs cluster size", file: "idle-wakeups-vs-n.png"}
	return idleNPlot(s, fig, "wakeups", "context switches a second (every thread)")
}

// idleNPlot draws one of the benchmark's measures (kind: cpu or wakeups)
// against N: the workers' mean with their range as bars, the control
// nodes' mean and the leader's own figure, and the target as dashed lines
// at 1.2 times the worker's and the control node's figure at 10 nodes.
func idleNPlot(s *results, fig figure, kind, unit string) (*plot.Plot, figure, error) {
	p := newPlot(fig.title+" (timers: lan, raft default)", "nodes (3 control + workers, one namespace each)", unit)
	series := []struct{ role, name string }{{"worker", "worker, mean (bars: range)"}, {"control", "control node, mean"}, {"leader", "raft leader"}}
	var lines []any
	var workers spread
	base := map[string]float64{} // the 10-node figure, for the targets
	xmax := 0.0
	var ticks []plot.Tick // at the sizes measured
	for _, sr := range series {
		var pts plotter.XYs
		for _, r := range s.find(idleNBench, "idle-"+kind+"-"+sr.role, nil) {
			n := num(r.Params["n"])
			pts = append(pts, plotter.XY{X: n, Y: r.Value})
			xmax = max(xmax, n)
			if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == n }) {
				ticks = append(ticks, plot.Tick{Value: n, Label: r.Params["n"]})
			}
			if n == 10 {
				base[sr.role] = r.Value
			}
			if sr.role == "worker" && len(r.Samples) > 0 {
				workers.XYs = append(workers.XYs, plotter.XY{X: n, Y: r.Value})
				workers.low = append(workers.low, r.Value-slices.Min(r.Samples))
				workers.high = append(workers.high, slices.Max(r.Samples)-r.Value)
			}
		}
		if len(pts) > 0 {
			lines = append(lines, sr.name, pts)
		}
	}
	if len(lines) == 0 {
		p.Title.Text += ": " + absent
		fig.caption = fig.title + ": " + absent + "."
		return p, fig, nil
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fig, err
	}
	if len(workers.XYs) > 0 {
		eb, err := plotter.NewYErrorBars(workers)
		if err != nil {
			return nil, fig, err
		}
		eb.Color = plotutil.Color(0)
		p.Add(eb)
	}
	for i, role := range []string{"worker", "control"} {
		b, ok := base[role]
		if !ok {
			continue
		}
		target, err := plotter.NewLine(plotter.XYs{{X: 10, Y: idleTarget * b}, {X: max(xmax, 50), Y: idleTarget * b}})
		if err != nil {
			return nil, fig, err
		}
		target.Color = plotutil.Color(i)
		target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(target)
		p.Legend.Add(fmt.Sprintf("target: %s ≤ %.1f× its 10-node figure", role, idleTarget), target)
	}
	p.X.Min, p.X.Max = 0, max(xmax, 50)*1.05
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min = 0
	p.Y.Max = roundUp(1.6 * p.Y.Max) // room above the lines for the legend
	p.Legend.Top, p.Legend.Left = true, true
	fig.caption = "`" + idleNBench + "`: real clusters of 3 control nodes and N-3 workers (`timers: lan`, raft at its default timing, log level info), " +
		"each node's " + unit + " over a 60 s window after a 30 s settle, measured from /proc (utime+stime; voluntary and involuntary context switches). " +
		"Issue 54's target: an idle worker at 50 nodes at most 1.2× its own figure at 10, and a control node likewise (the dashed lines)."
	return p, fig, nil
}

// roundUp is v rounded up to a round number (1, 1.5, 2, 2.5, 3, 4, 5, 6
// or 8 times a power of ten), so the axis gets its ticks.
func roundUp(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}
