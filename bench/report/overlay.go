package main

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The plots of BenchmarkOverlayThroughput: each path's throughput, and
// each round's ratio of meshd to Nebula alone (versus.go has the tables).

const overlayBench = "BenchmarkOverlayThroughput"

// overlayPaths are the benchmark's paths: metric and name on the plots.
var overlayPaths = []struct{ metric, name string }{
	{"installed", "meshd as installed"},
	{"harness", "meshd, e2e harness"},
	{"baseline", "Nebula alone"},
	{"wireguard-go", "wireguard-go"},
	{"raw", "raw veth"},
}

// spread is a median with the range of its samples, for error bars.
type spread struct {
	plotter.XYs
	low, high []float64
}

func (s spread) YError(i int) (float64, float64) { return s.low[i], s.high[i] }

func throughputPlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "TCP throughput: meshd vs Nebula alone vs wireguard-go vs raw veth", file: "throughput.png"}
	p := newPlot(fig.title, "", "Mbit/s (iperf3, one TCP flow; log scale)")
	var names []string
	var bars spread
	var labels []string
	for i, path := range overlayPaths {
		r, ok := s.one(overlayBench, path.metric, nil)
		if !ok || r.Value <= 0 {
			continue
		}
		lo, hi := r.Value, r.Value
		if len(r.Samples) > 0 {
			lo, hi = slices.Min(r.Samples), slices.Max(r.Samples)
		}
		names = append(names, path.name)
		bars.XYs = append(bars.XYs, plotter.XY{X: float64(i), Y: r.Value})
		bars.low, bars.high = append(bars.low, r.Value-lo), append(bars.high, hi-r.Value)
		labels = append(labels, fmt.Sprintf("%.0f", r.Value))
	}
	if len(bars.XYs) == 0 {
		p.Title.Text += ": " + absent
		fig.caption = "Overlay throughput: " + absent + " (`" + overlayBench + "` recorded nothing)."
		return p, fig, nil
	}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	pts, err := plotter.NewScatter(bars)
	if err != nil {
		return nil, fig, err
	}
	pts.Shape = draw.BoxGlyph{}
	pts.Radius = vg.Points(5)
	pts.Color = plotutil.Color(0)
	eb, err := plotter.NewYErrorBars(bars)
	if err != nil {
		return nil, fig, err
	}
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: bars.XYs, Labels: labels})
	if err != nil {
		return nil, fig, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XCenter
		lb.Offset.X = vg.Points(0)
	}
	lb.Offset.Y = vg.Points(8)
	p.Add(pts, eb, lb)
	ticks := make([]plot.Tick, len(bars.XYs))
	for i, xy := range bars.XYs {
		ticks[i] = plot.Tick{Value: xy.X, Label: names[i]}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = -0.6, float64(len(overlayPaths))-0.4
	p.Y.Min, p.Y.Max = 100, max(p.Y.Max*2, 1000)
	fig.caption = "`" + overlayBench + "`: the same bridge, the same rounds: meshd as installed (the packaged meshd.yaml), meshd with the e2e harness's settings, " +
		"the baseline program (a minimal standalone Nebula of the same module version), wireguard-go (userspace, over TUN) and the veth path without an overlay; the median of the rounds, the bar their range."
	return p, fig, nil
}

func overlayRatioPlot(s *results) (*plot.Plot, figure, error) {
	fig := figure{title: "Overlay TCP throughput over Nebula alone's, per round", file: "overlay-ratio.png"}
	p := newPlot(fig.title, "round (every path measured in turn)", "meshd / Nebula alone")
	var lines []any
	rounds := 0
	for _, path := range overlayPaths[:2] {
		r, ok := s.one(overlayBench, path.metric+"-tcp-ratio", nil)
		if !ok || len(r.Samples) == 0 {
			continue
		}
		var xy plotter.XYs
		for i, v := range r.Samples {
			xy = append(xy, plotter.XY{X: float64(i + 1), Y: v})
		}
		rounds = max(rounds, len(xy))
		lines = append(lines, fmt.Sprintf("%s (median %.2f)", path.name, r.Value), xy)
	}
	if len(lines) == 0 {
		p.Title.Text += ": " + absent
		fig.caption = "Overlay ratios: " + absent + "."
		return p, fig, nil
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fig, err
	}
	target, err := plotter.NewLine(plotter.XYs{{X: 0.5, Y: 1}, {X: float64(rounds) + 0.5, Y: 1}})
	if err != nil {
		return nil, fig, err
	}
	target.Color = plotutil.Color(3)
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(target)
	p.Legend.Add("target ≥ 1.0", target)
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = 4 * vg.Millimeter
	p.X.Min, p.X.Max = 0.5, float64(rounds)+0.5
	p.Y.Min, p.Y.Max = min(p.Y.Min, 0.6), max(p.Y.Max, 1.2)
	var ticks []plot.Tick // every 0.1, labelled to two places (the default ticks round 1.05 to "1")
	for v := math.Floor(p.Y.Min*10) / 10; v <= p.Y.Max+1e-9; v += 0.1 {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%.2f", v)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	var rs []plot.Tick
	for i := 1; i <= rounds; i++ {
		rs = append(rs, plot.Tick{Value: float64(i), Label: fmt.Sprint(i)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(rs)
	fig.caption = "`" + overlayBench + "`: each round's iperf3 throughput of meshd divided by that of Nebula alone in the same round; " +
		"the rounds interleave the paths, so a change of the machine's load falls on both sides of a ratio."
	return p, fig, nil
}
