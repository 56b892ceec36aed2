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

var update = flag.Bool("update", false, "rewrite the CLI contract goldens in testdata/")

// checkGolden compares r (exit code, stdout, stderr) with
// testdata/NAME.golden ("/" in NAME becomes "_"); -update rewrites the
// file. The Go version, which changes with the toolchain, is written as
// GOVERSION; repl replaces what else changes between runs (old, new
// pairs).
func checkGolden(t *testing.T, name string, r result, repl ...string) {
	t.Helper()
	got := fmt.Sprintf("exit %d\n-- stdout --\n%s-- stderr --\n%s", r.exit, r.stdout, r.stderr)
	got = strings.NewReplacer(append(repl, runtime.Version(), "GOVERSION")...).Replace(got)
	checkGoldenFile(t, filepath.Join("testdata", strings.ReplaceAll(name, "/", "_")+".golden"), got)
}

// checkGoldenFile compares got with the file at path; -update rewrites it.
func checkGoldenFile(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
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
		t.Errorf("%s differs from what the code gives (go test ./cmd/meshctl -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
