// Package benchrec is the record format of meshd's benchmark results: one
// JSON object per line, appended by the benchmarks (e2e, gossip) to the file
// named by $MESHD_BENCH_OUT and read by bench/report, which renders
// docs/performance.md's tables and plots from it.
//
// It is stdlib-only and imports nothing of the project.
//
// # The API the benchmarks call (stable)
//
//	benchrec.Add(benchrec.Result{
//		Name:   "BenchmarkOverlayThroughput", // benchmark or test, without "-2"
//		Metric: "meshd",                      // what was measured
//		Unit:   "Mbit/s",                     // ms, µs, s, MB, KiB, %, Mbit/s, s/GB (CPU per GB), /s (a rate), count, x (a ratio)
//		Value:  351.2,                        // the figure the table shows
//		Samples: []float64{...},              // optional: every observation, same unit
//		Params: map[string]string{"mtu": "1300"}, // optional: what distinguishes runs
//	})
//
// Add fills Time, Load and Host and appends one line; it is a no-op when
// $MESHD_BENCH_OUT is unset, so benchmarks run by hand cost nothing. In the
// e2e package, Record(tb, ...) wraps it (e2e/bench_record_test.go).
//
// When a (Name, Metric, Params) key is recorded more than once, the last
// record wins: `go test -bench -benchtime 3x` runs each benchmark once with
// b.N = 1 and then with b.N = 3, and the second run is the one to keep.
package benchrec

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Env names the file results are appended to.
const Env = "MESHD_BENCH_OUT"

// Result is one measured figure.
type Result struct {
	Name    string            `json:"name"`
	Metric  string            `json:"metric"`
	Unit    string            `json:"unit"`
	Value   float64           `json:"value"`
	Samples []float64         `json:"samples,omitempty"`
	Params  map[string]string `json:"params,omitempty"`
	// Filled by Add.
	Time time.Time `json:"time"`
	Load float64   `json:"load"` // 1-minute load average when recorded
	Host *Host     `json:"host,omitempty"`
}

// Host is the machine a result was measured on.
type Host struct {
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	Go     string `json:"go"`
	MemGiB int    `json:"mem_gib"`
}

// Key identifies a figure across records: the last record for a key wins.
func (r Result) Key() string {
	ks := make([]string, 0, len(r.Params))
	for k, v := range r.Params {
		ks = append(ks, k+"="+v)
	}
	slices.Sort(ks)
	return r.Name + "|" + r.Metric + "|" + strings.Join(ks, ",")
}

var mu sync.Mutex

// Add appends r to $MESHD_BENCH_OUT, if set. Each record is one write
// of one line to a file opened with O_APPEND, so several test processes
// may append to the same file.
func Add(r Result) error {
	path := os.Getenv(Env)
	if path == "" {
		return nil
	}
	return AddTo(path, r)
}

// AddTo is Add to a named file.
func AddTo(path string, r Result) error {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if r.Load == 0 {
		r.Load = Load()
	}
	if r.Host == nil {
		h := ThisHost()
		r.Host = &h
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Read returns the records of a results file, the last one per Key, in the
// order of their first appearance.
func Read(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Result
	at := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if i, ok := at[r.Key()]; ok {
			out[i] = r
			continue
		}
		at[r.Key()] = len(out)
		out = append(out, r)
	}
	return out, sc.Err()
}

// Load is the 1-minute load average, or -1 if unknown.
func Load() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(raw), &l); err != nil {
		return -1
	}
	return l
}

// ThisHost describes the machine this process runs on.
func ThisHost() Host {
	h := Host{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(raw))
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(raw), "MemTotal: %d kB", &kb); err == nil {
			h.MemGiB = (kb + 1<<19) >> 20
		}
	}
	return h
}
