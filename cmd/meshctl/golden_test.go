package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite cmd/meshctl/testdata/*.golden from the output")

// checkGolden compares one invocation (exit code, stdout, stderr) with
// testdata/NAME.golden; -update rewrites it. The Go version, which changes
// with the toolchain, is written as GOVERSION; repl replaces what else
// changes between runs (old, new pairs).
func checkGolden(t *testing.T, name string, r result, repl ...string) {
	t.Helper()
	got := fmt.Sprintf("exit: %d\n--- stdout\n%s--- stderr\n%s", r.exit, r.stdout, r.stderr)
	got = strings.NewReplacer(append(repl, runtime.Version(), "GOVERSION")...).Replace(got)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/meshctl -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (-update rewrites it)\n--- got\n%s--- want\n%s", path, got, want)
	}
}
