package benchrec

import (
	"path/filepath"
	"testing"
)

// TestAddRead: the last record of a key wins, keys differ by parameters,
// and Add fills the time, the load and the host.
func TestAddRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	t.Setenv(Env, path)
	for _, r := range []Result{
		{Name: "BenchmarkJoin", Metric: "join", Unit: "ms", Value: 1},
		{Name: "BenchmarkX", Metric: "detect", Unit: "ms", Value: 2, Params: map[string]string{"delay": "0s"}},
		{Name: "BenchmarkX", Metric: "detect", Unit: "ms", Value: 3, Params: map[string]string{"delay": "25ms"}},
		{Name: "BenchmarkJoin", Metric: "join", Unit: "ms", Value: 4, Samples: []float64{3, 5}},
	} {
		if err := Add(r); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(rs), rs)
	}
	if rs[0].Value != 4 || len(rs[0].Samples) != 2 {
		t.Fatalf("BenchmarkJoin: %+v, want the last record", rs[0])
	}
	if rs[1].Value != 2 || rs[2].Value != 3 {
		t.Fatalf("delays: %v, %v", rs[1].Value, rs[2].Value)
	}
	if rs[0].Time.IsZero() || rs[0].Host == nil || rs[0].Host.CPUs == 0 {
		t.Fatalf("not filled: %+v", rs[0])
	}
}

// TestAddUnset: without $MESHD_BENCH_OUT, Add writes nothing.
func TestAddUnset(t *testing.T) {
	t.Setenv(Env, "")
	if err := Add(Result{Name: "x"}); err != nil {
		t.Fatal(err)
	}
}
