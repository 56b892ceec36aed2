// Command report turns the results `make bench` recorded into
// docs/performance.md's generated part and docs/plots/*.png.
//
//	go run ./bench/report -in build/bench/results.jsonl \
//		-gotest build/bench/gossip.txt -doc docs/performance.md -plots docs/plots
//
// It reads the JSON lines of package bench/benchrec (-in) and, for
// benchmarks that only call b.ReportMetric, the text `go test -bench`
// printed (-gotest, repeatable). It prints the whole table to stdout,
// writes the plots, and replaces what lies between the markers
// <!-- bench:begin --> and <!-- bench:end --> in the -doc file; the
// hand-written prose outside them is kept. Figures absent from the input
// are said to be "not measured in this run", not taken from an older run.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/meshd/meshd/bench/benchrec"
)

const (
	beginMarker = "<!-- bench:begin -->"
	endMarker   = "<!-- bench:end -->"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	in := flag.String("in", "build/bench/results.jsonl", "results recorded by the benchmarks (JSON lines)")
	var gotest multiFlag
	flag.Var(&gotest, "gotest", "output of `go test -bench` to take b.ReportMetric figures from (repeatable)")
	doc := flag.String("doc", "docs/performance.md", "page whose generated part (between the markers) is rewritten; empty: print only")
	plots := flag.String("plots", "docs/plots", "directory for the PNG plots")
	flag.Parse()
	if err := run(*in, gotest, *doc, *plots); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(in string, gotest []string, doc, plotDir string) error {
	var rs []benchrec.Result
	if in != "" {
		got, err := benchrec.Read(in)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		rs = got
	}
	recorded := map[string]bool{}
	for _, r := range rs {
		recorded[r.Name] = true
	}
	for _, f := range gotest {
		got, err := readGoTest(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, r := range got {
			if !recorded[r.Name] { // a benchmark that records is read from its records only
				rs = append(rs, r)
			}
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("no results in %s %v: nothing to report", in, gotest)
	}
	set := newResults(rs)
	table := renderTable(set) + "\n" + renderOverlayComparison(set)
	fmt.Print(table)
	if doc == "" {
		return nil
	}
	if err := os.MkdirAll(plotDir, 0o755); err != nil {
		return err
	}
	figs, err := writePlots(set, plotDir)
	if err != nil {
		return err
	}
	page := renderPage(set, table, figs, plotDir, doc)
	return replaceGenerated(doc, page)
}

// replaceGenerated puts body between the markers in the file at path.
func replaceGenerated(path, body string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b := bytes.Index(raw, []byte(beginMarker))
	e := bytes.Index(raw, []byte(endMarker))
	if b < 0 || e < b {
		return fmt.Errorf("%s: no %s ... %s markers to write between", path, beginMarker, endMarker)
	}
	var out bytes.Buffer
	out.Write(raw[:b+len(beginMarker)])
	out.WriteString("\n" + body)
	out.Write(raw[e:])
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// benchLine is one result line of `go test -bench`: the name with its
// GOMAXPROCS suffix, the iterations, then value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

// readGoTest takes every b.ReportMetric figure (not ns/op, B/op,
// allocs/op) from `go test -bench` output. A metric ending in a unit
// loses it to the unit: "join-all-ms" is metric "join-all" in ms,
// "meshd-Mbps" metric "meshd" in Mbit/s, "wireguard-go-cpu-per-gb-s/GB"
// metric "wireguard-go-cpu-per-gb" in s/GB, "p99-µs" metric "p99" in µs,
// "queries/s" metric "queries" in /s (a rate).
func readGoTest(path string) ([]benchrec.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var out []benchrec.Result
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		segs := strings.Split(m[1], "/")
		params := map[string]string{}
		for _, s := range segs[1:] {
			if k, v, ok := strings.Cut(s, "="); ok {
				params[k] = v
			} else {
				params["run"] = s
			}
		}
		fs := strings.Fields(m[3])
		for i := 0; i+1 < len(fs); i += 2 {
			v, err := strconv.ParseFloat(fs[i], 64)
			unit := fs[i+1]
			if err != nil || unit == "ns/op" || unit == "B/op" || unit == "allocs/op" {
				continue
			}
			metric, u := splitUnit(unit)
			out = append(out, benchrec.Result{Name: segs[0], Metric: metric, Unit: u, Value: v,
				Params: params, Time: st.ModTime()})
		}
	}
	return out, sc.Err()
}

// splitUnit splits a b.ReportMetric unit into metric and unit.
func splitUnit(m string) (string, string) {
	for _, u := range []struct{ suffix, unit string }{{"-Mbps", "Mbit/s"}, {"-s/GB", "s/GB"}, {"-ms", "ms"}, {"-µs", "µs"}, {"-s", "s"}, {"-MB", "MB"}, {"-KiB", "KiB"}} {
		if base, ok := strings.CutSuffix(m, u.suffix); ok && base != "" {
			return base, u.unit
		}
	}
	if base, ok := strings.CutSuffix(m, "/s"); ok && base != "" && !strings.ContainsAny(base, "-/%") {
		return base, "/s" // "queries/s"; not "direct-Mbit/s", which stays as it was
	}
	if strings.Contains(m, "KiB") {
		return m, "KiB"
	}
	if strings.Contains(m, "%") {
		return m, "%"
	}
	return m, "count"
}
