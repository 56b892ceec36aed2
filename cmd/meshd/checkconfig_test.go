package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
)

var update = flag.Bool("update", false, "rewrite cmd/meshd/testdata/check-config/*.golden from the output")

// meshd runs one in-process meshd invocation that must not start the
// daemon (check-config, version, help).
func meshd(t *testing.T, args ...string) (exit int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	exit = run(args, &out, &errOut)
	return exit, out.String(), errOut.String()
}

// TestCheckConfigGolden checks every file of testdata/check-config with
// `meshd check-config --config FILE` and compares exit code, stdout and
// stderr with FILE's .golden (-update rewrites them). Files named ok-*
// must pass; every other one must fail with ConfigInvalid, listing each
// of its problems on a line of its own.
func TestCheckConfigGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "check-config", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			exit, stdout, stderr := meshd(t, "check-config", "--config", f)
			wantExit := 1
			if strings.HasPrefix(name, "ok-") {
				wantExit = 0
			}
			if exit != wantExit {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", exit, wantExit, stdout, stderr)
			}
			if wantExit != 0 && !strings.HasPrefix(stderr, string(codes.ConfigInvalid)+": ") {
				t.Fatalf("stderr does not start with %s:\n%s", codes.ConfigInvalid, stderr)
			}
			got := fmt.Sprintf("exit: %d\n--- stdout\n%s--- stderr\n%s", exit, stdout, stderr)
			got = strings.ReplaceAll(got, f, "FILE")
			got = kernelGrants.ReplaceAllString(got, "this kernel grants: KERNEL'S")
			checkGolden(t, strings.TrimSuffix(f, ".yaml")+".golden", got)
		})
	}
}

// kernelGrants is the part of check-config's offloads line that depends
// on the machine (mesh.TestKernelOffloads checks the probe).
var kernelGrants = regexp.MustCompile(`this kernel grants: [^\n]*`)

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/meshd -update writes it)", err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (-update rewrites it)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// The daemon's flags apply to check-config as they do at start (before or
// after the command), and a problem they cause is marked (flag).
func TestCheckConfigFlags(t *testing.T) {
	ok := filepath.Join("testdata", "check-config", "ok-valid.yaml")
	missing := filepath.Join(t.TempDir(), "none.yaml")
	tests := []struct {
		name     string
		args     []string
		exit     int
		contains string
	}{
		{"fail/relative-state-dir-flag", []string{"--state-dir", "rel", "check-config", "--config", ok}, 1,
			`(flag) state_dir = "rel": must be an absolute path`},
		{"ok/config-before-command", []string{"--config", ok, "check-config"}, 0, ok + ": valid"},
		{"fail/missing-explicit-file", []string{"check-config", "--config", missing}, 1, "no such file or directory"},
		{"usage/extra-argument", []string{"check-config", "--config", ok, "extra"}, 2, `unexpected argument "extra"`},
		{"usage/unknown-flag", []string{"check-config", "--confg", ok}, 2, "flag provided but not defined: -confg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exit, stdout, stderr := meshd(t, tt.args...)
			if exit != tt.exit || !strings.Contains(stdout+stderr, tt.contains) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s\nwant it to contain %q", exit, tt.exit, stdout, stderr, tt.contains)
			}
		})
	}
}

// A meshd started on an invalid file refuses with the same list
// check-config prints, before it touches its state dir or socket.
func TestStartListsEveryProblem(t *testing.T) {
	f := filepath.Join("testdata", "check-config", "several.yaml")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	flags := []string{"--config", f, "--state-dir", state, "--socket", filepath.Join(dir, "s")}
	_, _, want := meshd(t, append(flags, "check-config")...)
	exit, stdout, stderr := meshd(t, flags...)
	if exit != 1 || stdout != "" || stderr != want || strings.Count(stderr, "\n  line ") < 9 {
		t.Fatalf("exit %d, stdout %q\nstderr:\n%s\nwant check-config's:\n%s", exit, stdout, stderr, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused start left %v in %s", ents, dir)
	}
}
