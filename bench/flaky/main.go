// Command flaky reads the `go test -json` streams of several runs of one
// suite (scripts/flaky.sh) and prints, per test, how many runs it passed
// and its slowest run, failures first, then the failing lines of each
// failed run. It exits 1 when any test failed in any run.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is the part of a test2json event this reads.
type event struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// result is one test over every run.
type result struct {
	name            string
	runs, passed    int
	skipped         int
	slowest         time.Duration
	slowestRun      int
	failures        []string // per failed run: the lines that say why
	failedRuns      []int
	outputThisRun   []string
	finishedThisRun bool
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: flaky RUN.json...  (go test -json streams of the same suite)")
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	tests := map[string]*result{}
	for k, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flaky:", err)
			os.Exit(2)
		}
		err = read(f, k+1, tests)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "flaky: %s: %v\n", path, err)
			os.Exit(2)
		}
	}
	if report(os.Stdout, tests, flag.NArg()) {
		os.Exit(1)
	}
}

// read adds one run's events to tests. A test that started and never
// ended (the binary timed out or was killed) counts as failed.
func read(r io.Reader, run int, tests map[string]*result) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Test == "" || strings.Contains(e.Test, "/") {
			continue // build output, package lines and subtests are not counted
		}
		t := tests[e.Test]
		if t == nil {
			t = &result{name: e.Test}
			tests[e.Test] = t
		}
		switch e.Action {
		case "run":
			t.runs++
			t.outputThisRun, t.finishedThisRun = nil, false
		case "output":
			t.outputThisRun = append(t.outputThisRun, e.Output)
		case "pass", "fail", "skip":
			t.finishedThisRun = true
			d := time.Duration(e.Elapsed * float64(time.Second))
			switch e.Action {
			case "pass":
				t.passed++
			case "skip":
				t.skipped++
			case "fail":
				t.failedRuns = append(t.failedRuns, run)
				t.failures = append(t.failures, why(t.outputThisRun))
			}
			if e.Action != "skip" && d > t.slowest {
				t.slowest, t.slowestRun = d, run
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, t := range tests {
		if t.runs > 0 && !t.finishedThisRun && len(t.outputThisRun) > 0 {
			t.failedRuns = append(t.failedRuns, run)
			t.failures = append(t.failures, "never finished (timeout or killed)\n"+why(t.outputThisRun))
			t.finishedThisRun = true
		}
	}
	return nil
}

// why keeps the lines of a failed test's output that say why: the test's
// own file:line messages and panics, at most 20.
func why(out []string) string {
	var keep []string
	for _, l := range out {
		s := strings.TrimSpace(l)
		if strings.Contains(s, "_test.go:") || strings.HasPrefix(s, "panic:") || strings.HasPrefix(s, "--- FAIL") {
			keep = append(keep, strings.TrimRight(l, "\n"))
		}
	}
	if len(keep) > 20 {
		keep = append(keep[:20], fmt.Sprintf("    ... %d more lines", len(keep)-20))
	}
	return strings.Join(keep, "\n")
}

// report prints the table and the failures; it says whether any failed.
func report(w io.Writer, tests map[string]*result, runs int) bool {
	var rs []*result
	for _, t := range tests {
		if t.runs > 0 && t.skipped < t.runs {
			rs = append(rs, t)
		}
	}
	slices.SortFunc(rs, func(a, b *result) int {
		if fa, fb := len(a.failedRuns) > 0, len(b.failedRuns) > 0; fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	fmt.Fprintf(w, "%d runs\n%-40s %7s %10s %s\n", runs, "test", "passed", "slowest", "failed in runs")
	failed := false
	for _, t := range rs {
		runsOf := ""
		if len(t.failedRuns) > 0 {
			failed = true
			runsOf = fmt.Sprint(t.failedRuns)
		}
		fmt.Fprintf(w, "%-40s %3d/%-3d %10s %s\n", t.name, t.passed, t.runs-t.skipped,
			t.slowest.Round(100*time.Millisecond), runsOf)
	}
	for _, t := range rs {
		for i, f := range t.failures {
			fmt.Fprintf(w, "\n%s failed in run %d:\n%s\n", t.name, t.failedRuns[i], f)
		}
	}
	return failed
}
