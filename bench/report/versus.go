package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/meshd/meshd/bench/benchrec"
)

// The overlay comparison of issue 53 item 5: every path of
// BenchmarkOverlayThroughput against wireguard-go and against Nebula
// alone, and issue 53's targets for meshd as installed. A ratio is the
// median of the rounds' ratios: the benchmark records each figure's
// samples in round order, so samples of two paths with the same index
// were measured in the same round, minutes apart at most.

const (
	wireguardPath = "wireguard-go"
	nebulaPath    = "baseline"
	// meshdOnMain is meshd's single-stream figure on main 8b0a8d4 (issue
	// 53's table, Mbit/s): the target is three times it.
	meshdOnMain = 720.0
)

// overlayFigure is one figure every path records: its metric is the
// path's name followed by suffix.
type overlayFigure struct {
	suffix, heading, unit string
	format                string
}

var overlayFigures = []overlayFigure{
	{"", "TCP, 1 stream", "Mbit/s", "%.0f"},
	{"-p4", "TCP, 4 streams", "Mbit/s", "%.0f"},
	{"-rtt", "ping RTT", "ms", "%.3f"},
	{"-cpu-per-gb", "CPU s per GB, 1 stream (both ends)", "s/GB", "%.1f"},
	{"-p4-cpu-per-gb", "CPU s per GB, 4 streams (both ends)", "s/GB", "%.1f"},
}

// overlayFig is path's figure f, marked as shown.
func (s *results) overlayFig(path string, f overlayFigure) (benchrec.Result, bool) {
	r, ok := s.one(overlayBench, path+f.suffix, nil)
	if ok {
		s.used[r.Key()] = true
	}
	return r, ok
}

// roundRatios is a's figure over b's per round, with their median; with
// no samples to pair (figures read from `go test` output) the ratio of
// the two figures alone.
func roundRatios(a, b benchrec.Result) (median float64, each []float64) {
	if len(a.Samples) > 0 && len(a.Samples) == len(b.Samples) {
		for i := range a.Samples {
			each = append(each, a.Samples[i]/b.Samples[i])
		}
		return medianOf(each), each
	}
	return a.Value / b.Value, nil
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fmtRatio is a median ratio with the range of the rounds'.
func fmtRatio(median float64, each []float64) string {
	if len(each) < 2 {
		return fmt.Sprintf("%.2f×", median)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", median, slices.Min(each), slices.Max(each))
}

// renderOverlayComparison is the comparison's markdown: each path's
// figures, each against wireguard-go and against Nebula alone, and the
// targets.
func renderOverlayComparison(s *results) string {
	var b strings.Builder
	b.WriteString("### The overlay against wireguard-go and Nebula alone (issue 53)\n\n")
	if _, ok := s.one(overlayBench, wireguardPath, nil); !ok {
		b.WriteString("wireguard-go: not measured in this run (`" + overlayBench + "` recorded no wireguard-go path).\n")
		return b.String()
	}
	b.WriteString("`" + overlayBench + "`, interleaved rounds: the median of the rounds, then their range. " +
		"CPU is the sending and receiving overlay processes' (/proc/PID/stat) over the flow, per GB (10⁹ bytes) the sender wrote; raw veth has none.\n\n")
	b.WriteString("| path |")
	for _, f := range overlayFigures {
		b.WriteString(" " + f.heading + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(overlayFigures)) + "\n")
	for _, p := range overlayPaths {
		b.WriteString("| " + p.name + " |")
		for _, f := range overlayFigures {
			r, ok := s.overlayFig(p.metric, f)
			switch {
			case !ok && p.metric == "raw" && strings.Contains(f.suffix, "cpu"):
				b.WriteString(" – |")
			case !ok:
				b.WriteString(" not measured |")
			default:
				b.WriteString(" " + fmtFigure(r, f) + " |")
			}
		}
		b.WriteString("\n")
	}
	for _, ref := range []struct{ metric, name string }{{wireguardPath, "wireguard-go"}, {nebulaPath, "Nebula alone"}} {
		fmt.Fprintf(&b, "\nEach path over %s, per round (lower is better for RTT and CPU):\n\n| path |", ref.name)
		for _, f := range overlayFigures {
			b.WriteString(" " + f.heading + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(overlayFigures)) + "\n")
		for _, p := range overlayPaths {
			if p.metric == ref.metric {
				continue
			}
			b.WriteString("| " + p.name + " |")
			for _, f := range overlayFigures {
				a, okA := s.overlayFig(p.metric, f)
				r, okR := s.overlayFig(ref.metric, f)
				if !okA || !okR {
					b.WriteString(" – |")
					continue
				}
				b.WriteString(" " + fmtRatio(roundRatios(a, r)) + " |")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n" + renderIssue53Targets(s))
	return b.String()
}

func fmtFigure(r benchrec.Result, f overlayFigure) string {
	out := fmt.Sprintf("**"+f.format+"** %s", r.Value, f.unit)
	if len(r.Samples) > 1 {
		out += fmt.Sprintf(" ("+f.format+"–"+f.format+")", slices.Min(r.Samples), slices.Max(r.Samples))
	}
	return out
}

// target is one of issue 53's targets for meshd as installed.
type target struct {
	what, want string
	metric     string // the figure's suffix (overlayFigures)
	ref        string // the path it is a ratio to; "" for the figure itself
	atLeast    float64
	atMost     float64
}

var issue53Targets = []target{
	{what: "single TCP stream over wireguard-go's", want: "≥ 1.0×", ref: wireguardPath, atLeast: 1.0},
	{what: "single TCP stream over meshd's 720 Mbit/s on main 8b0a8d4", want: "≥ 3× (2,160 Mbit/s)", atLeast: 3 * meshdOnMain},
	{what: "4 TCP streams over wireguard-go's", metric: "-p4", want: "≥ 1.0×", ref: wireguardPath, atLeast: 1.0},
	{what: "CPU per GB, 1 stream, over wireguard-go's", metric: "-cpu-per-gb", want: "≤ 1.2×", ref: wireguardPath, atMost: 1.2},
	{what: "ping RTT over Nebula alone's", metric: "-rtt", want: "≤ 1.1×", ref: nebulaPath, atMost: 1.1},
}

// renderIssue53Targets judges meshd as installed (packaged defaults)
// against issue 53's targets. A ratio at least its target is met when the
// median's 95% interval (notch) reaches it, as in the whole table; a
// figure at least its target, or anything at most its target, when the
// median is.
func renderIssue53Targets(s *results) string {
	var b strings.Builder
	b.WriteString("Issue 53's targets, meshd as installed (packaged defaults):\n\n| target | figure | want | |\n|---|---|---|---|\n")
	for _, t := range issue53Targets {
		i := slices.IndexFunc(overlayFigures, func(f overlayFigure) bool { return f.suffix == t.metric })
		f := overlayFigures[i]
		a, ok := s.overlayFig("installed", f)
		var r benchrec.Result
		if ok && t.ref != "" {
			r, ok = s.overlayFig(t.ref, f)
		}
		if !ok {
			fmt.Fprintf(&b, "| %s | not measured in this run | %s | |\n", t.what, t.want)
			continue
		}
		v, fig, interval := a.Value, fmtFigure(a, f)+fmt.Sprintf(", %.2f× 720", a.Value/meshdOnMain), ""
		if t.ref != "" {
			var each []float64
			v, each = roundRatios(a, r)
			fig = fmtRatio(v, each)
			if lo, hi := notch(v, each); t.atLeast != 0 && len(each) >= 3 {
				v, interval = hi, fmt.Sprintf(" (95%% interval of the median %.2f–%.2f)", lo, hi)
			}
		}
		verdict := "met"
		if (t.atLeast != 0 && v < t.atLeast) || (t.atMost != 0 && v > t.atMost) {
			verdict = "**missed**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s%s |\n", t.what, fig, t.want, verdict, interval)
	}
	return b.String()
}
