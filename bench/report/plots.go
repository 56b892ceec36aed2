package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// figure is one PNG written and the caption the page gives it.
type figure struct {
	title, file, caption string
}

const absent = "not measured in this run"

// writePlots draws the four plots issue 10 asks for, the overlay's
// ratios per round (issue 25) and idle cost against N (issue 54). A plot
// whose data is absent is still written, titled so, so the page never
// shows an older run's picture as this one's.
func writePlots(s *results, dir string) ([]figure, error) {
	var figs []figure
	for _, f := range []func(*results) (*plot.Plot, figure, error){joinPlot, formationPlot, detectionPlot, throughputPlot, overlayRatioPlot, changePlot, idleCPUPlot, idleWakeupsPlot} {
		p, fig, err := f(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fig.file, err)
		}
		p.Add(plotter.NewGrid())
		if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, fig.file)); err != nil {
			return nil, err
		}
		figs = append(figs, fig)
	}
	return figs, nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

// cdf is the empirical distribution of xs: (x, fraction at or below x).
func cdf(xs []float64, scale float64) plotter.XYs {
	xs = slices.Sorted(slices.Values(xs))
	pts := make(plotter.XYs, 0, len(xs)+1)
	pts = append(pts, plotter.XY{X: 0, Y: 0})
	for i, x := range xs {
		pts = append(pts, plotter.XY{X: x * scale, Y: float64(i+1) / float64(len(xs))})
	}
	return pts
}

func joinPlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "Join latency under a 50-join burst", file: "join-latency.png"}
	p := newPlot(fig.title+" (CDF)", "seconds from the join's start to its exit", "fraction of joins done")
	var lines []any
	for _, r := range s.find("TestJoinBurst50", "join", nil) {
		if len(r.Samples) > 0 {
			lines = append(lines, fmt.Sprintf("50 at once, %s", label(r, map[string]string{"joins": ""})), cdf(r.Samples, 1e-3))
		}
	}
	if fs := s.find("TestFormation", "worker-join", nil); len(fs) > 0 && len(fs[len(fs)-1].Samples) > 0 {
		r := fs[len(fs)-1]
		lines = append(lines, fmt.Sprintf("formation n=%s, batches of %s", r.Params["n"], r.Params["batch"]), cdf(r.Samples, 1e-3))
	}
	if len(lines) == 0 {
		p.Title.Text += ": " + absent
		fig.caption = "Join latency under a burst: " + absent + "."
		return p, fig, nil
	}
	for i := 0; i < len(lines); i += 2 {
		l, err := plotter.NewLine(lines[i+1].(plotter.XYs))
		if err != nil {
			return nil, fig, err
		}
		l.StepStyle = plotter.PostStep
		l.Color = plotutil.Color(i / 2)
		l.Dashes = plotutil.Dashes(i / 2)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(lines[i].(string), l)
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Millimeter
	p.Legend.Top = false
	p.Legend.YOffs = 4 * vg.Millimeter
	fig.caption = "Each line is one burst's joins (`TestJoinBurst50`, every `meshctl join` started at the same moment through 3 control nodes), " +
		"and the workers of the largest `TestFormation` cluster joining 10 at a time. The burst's target is the last exit within 10 s of the first start."
	return p, fig, nil
}

func formationPlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "Formation time vs cluster size", file: "formation.png"}
	p := newPlot(fig.title, "nodes (3 control + workers, one namespace each)", "seconds")
	series := []struct{ metric, name string }{
		{"formation", "first join to all alive everywhere"},
		{"joins", "first join to last join's exit"},
		{"converge", "last join to all alive everywhere"},
	}
	var lines []any
	for _, timers := range []string{"fast", "lan", ""} {
		for _, sr := range series {
			var pts plotter.XYs
			for _, r := range s.find("TestFormation", sr.metric, nil) {
				if r.Params["timers"] == timers {
					pts = append(pts, plotter.XY{X: num(r.Params["n"]), Y: r.Value})
				}
			}
			if len(pts) > 0 {
				name := sr.name
				if timers != "" {
					name = timers + " timers: " + name
				}
				lines = append(lines, name, pts)
			}
		}
	}
	if len(lines) == 0 {
		p.Title.Text += ": " + absent
		fig.caption = "Formation time vs cluster size: " + absent + "."
		return p, fig, nil
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fig, err
	}
	p.Y.Min = 0
	var stalled, sizes []string
	for _, r := range s.find("TestFormation", "joined", nil) {
		n := num(r.Params["n"])
		p.X.Max = max(p.X.Max, n)
		if r.Value < n {
			sizes = append(sizes, "n="+r.Params["n"])
			stalled = append(stalled, fmt.Sprintf("n=%s (%s) did not form: %.0f of %s nodes joined", r.Params["n"], label(r, map[string]string{"n": "", "batch": ""}), r.Value, r.Params["n"]))
		}
	}
	p.X.Min, p.X.Max = 0, p.X.Max*1.05
	p.Y.Max *= 1.05
	if len(sizes) > 0 {
		p.Title.Text += " (did not form: " + strings.Join(sizes, ", ") + ")"
	}
	fig.caption = strings.Join(append(stalled, ""), ". ") + "`TestFormation`: the control nodes join one after the other, then the workers in concurrent batches of 10 (tokens minted beforehand); " +
		"\"all alive everywhere\" is every node listing all N alive in `meshctl nodes` (polled on every node's local API, confirmed by `meshctl nodes -o json`)."
	return p, fig, nil
}

func detectionPlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "Failure detection vs round-trip time (fast timers)", file: "detection.png"}
	p := newPlot(fig.title, "RTT between hosts, ms (twice the one-way delay added)", "ms until every node shows the killed worker failed")
	var mean, samples plotter.XYs
	for _, r := range s.find("BenchmarkFailureDetection", "detect", fast) {
		d, err := time.ParseDuration(r.Params["delay"])
		if err != nil {
			continue
		}
		rtt := 2 * float64(d.Milliseconds())
		mean = append(mean, plotter.XY{X: rtt, Y: r.Value})
		for _, v := range r.Samples {
			samples = append(samples, plotter.XY{X: rtt, Y: v})
		}
	}
	if len(mean) == 0 {
		p.Title.Text += ": " + absent
		fig.caption = "Failure detection vs RTT: " + absent + "."
		return p, fig, nil
	}
	l, pts, err := plotter.NewLinePoints(mean)
	if err != nil {
		return nil, fig, err
	}
	l.Color, pts.Color = plotutil.Color(0), plotutil.Color(0)
	p.Add(l, pts)
	p.Legend.Add("mean", l, pts)
	if len(samples) > 0 {
		sc, err := plotter.NewScatter(samples)
		if err != nil {
			return nil, fig, err
		}
		sc.Shape = draw.CrossGlyph{}
		sc.Color = plotutil.Color(1)
		p.Add(sc)
		p.Legend.Add("each kill", sc)
	}
	xmax := mean[len(mean)-1].X
	target, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 2000}, {X: max(xmax, 1), Y: 2000}})
	if err != nil {
		return nil, fig, err
	}
	target.Color = color.RGBA{R: 200, A: 255}
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(target)
	p.Legend.Add("target 2 s", target)
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = 4 * vg.Millimeter
	p.Y.Min = 0
	p.Y.Max = max(p.Y.Max, 2200)
	fig.caption = "`BenchmarkFailureDetection` (4 nodes, `timers: fast`): a worker killed with SIGKILL; the delay is added by a userspace forwarder in the hub namespace " +
		"(this kernel has no netem). Before each kill the cluster is watched 3 s for false positives."
	return p, fig, nil
}

// relPath is file in plotDir as the page at doc links it.
func relPath(doc, plotDir, file string) string {
	rel, err := filepath.Rel(filepath.Dir(doc), filepath.Join(plotDir, file))
	if err != nil {
		return filepath.Join(plotDir, file)
	}
	return filepath.ToSlash(rel)
}

// changePlot is issue 32's: how long a change takes to reach each
// worker's copy, one line per harness run (CDF).
func changePlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "A removal reaching every worker", file: "change-to-workers.png"}
	p := newPlot(fig.title+" (CDF)", "seconds from the remove call to a worker's copy holding it", "fraction of workers")
	var lines []any
	for _, r := range s.find("BenchmarkControlScale", "removal_to_all", nil) {
		if len(r.Samples) > 0 {
			lines = append(lines, fmt.Sprintf("%s workers, 3 agents, timers=%s", r.Params["workers"], r.Params["timers"]), cdf(r.Samples, 1))
		}
	}
	for _, r := range s.find("BenchmarkWatchScale", "change_to_all", nil) {
		if len(r.Samples) > 0 {
			lines = append(lines, fmt.Sprintf("%s watchers, 3 control planes, raft defaults", r.Params["watchers"]), cdf(r.Samples, 1))
		}
	}
	if len(lines) == 0 {
		p.Title.Text += ": " + absent
		fig.caption = "A removal reaching every worker: " + absent + "."
		return p, fig, nil
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, fig, err
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Left = false
	p.Legend.Top = false
	p.Legend.YOffs = 4 * vg.Millimeter
	fig.caption = "Each line is one removal: the time from the remove call to each worker's watch copy holding the removed record " +
		"(and, at 1,000, its Nebula fingerprint among the revocations). Targets (issue 32): every worker within 2 s at 1,000 workers, within 5 s at 10,000."
	return p, fig, nil
}
