package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The built meshd prints its version or its usage and exits 0, touching no
// path: run in an empty directory, with --state-dir and --socket pointing
// into it (a meshd that started its daemon would create both), nothing
// appears there. A daemon that started anyway is killed at the deadline
// and fails the test.
func TestVersionAndHelpTouchNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meshd")
	}
	bin := filepath.Join(t.TempDir(), "meshd")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=1.2.3-test -X main.commit=0123abcd4567", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tests := []struct {
		args []string
		want string // stdout starts with it
	}{
		{[]string{"version"}, "meshd 1.2.3-test (commit 0123abcd4567, go"},
		{[]string{"--version"}, "meshd 1.2.3-test (commit 0123abcd4567, go"},
		{[]string{"-version"}, "meshd 1.2.3-test (commit 0123abcd4567, go"},
		{[]string{"-h"}, "usage:\n  meshd [flags]"},
		{[]string{"--help"}, "usage:\n  meshd [flags]"},
		{[]string{"help"}, "usage:\n  meshd [flags]"},
		{[]string{"--state-dir", "STATE", "--socket", "SOCK", "version"}, "meshd 1.2.3-test"},
		{[]string{"--state-dir", "STATE", "--socket", "SOCK", "--help"}, "usage:"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.NewReplacer("STATE", filepath.Join(dir, "state"), "SOCK", filepath.Join(dir, "s")).Replace(a)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Dir = dir
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err != nil || ctx.Err() != nil {
				t.Fatalf("%v (deadline: %v)\nstdout:\n%s\nstderr:\n%s", err, ctx.Err(), stdout.String(), stderr.String())
			}
			if !strings.HasPrefix(stdout.String(), tt.want) || stderr.Len() != 0 {
				t.Fatalf("stdout:\n%s\nstderr:\n%s\nwant stdout to start with %q and no stderr", stdout.String(), stderr.String(), tt.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("meshd %s created %v in its working directory", strings.Join(args, " "), ents)
			}
		})
	}
}

// A mistake on meshd's command line exits 2 with the usage on stderr.
func TestUsageMistakes(t *testing.T) {
	for _, args := range [][]string{{"verison"}, {"version", "now"}, {"--no-such-flag"}, {"help", "me"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			exit, stdout, stderr := meshd(t, args...)
			if exit != 2 || stdout != "" || stderr == "" {
				t.Fatalf("exit %d (want 2), stdout %q, stderr %q", exit, stdout, stderr)
			}
		})
	}
}
