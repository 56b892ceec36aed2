// Package childtest runs part of a test in a child process: the test
// binary again, running one named test, talked to in lines over its
// stdin and stdout. The scale benchmarks put their simulated workers
// there: one process may hold 20,000 open files on the machines meshd
// is tested on and a stream takes one at each end, and the control
// nodes' CPU and heap are then the parent's alone.
//
// Import rule (deps_test.go): may import no meshd package.
package childtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Child is a running child process.
type Child struct {
	in    io.WriteCloser
	lines chan string
}

// Start runs the test named test of this binary in a child process with
// env added to its environment (KEY=VALUE). It ends when the test does:
// closing its stdin (at tb's cleanup) tells it to.
func Start(tb testing.TB, test string, env ...string) *Child {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &Child{in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	tb.Cleanup(func() {
		_ = in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return c
}

// StartSpec is Start with spec, as JSON in a file of tb's (0600), named
// to the child by the environment variable env: what the child reads
// with Spec.
func StartSpec(tb testing.TB, test, env string, spec any) *Child {
	tb.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "spec.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
	return Start(tb, test, env+"="+path)
}

// Spec reads the spec StartSpec gave the child into v; ok is false when
// env is not set (the test runs on its own, not as a child).
func Spec(env string, v any) (ok bool, err error) {
	path := os.Getenv(env)
	if path == "" {
		return false, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return true, err
	}
	return true, json.Unmarshal(raw, v)
}

// Send writes one line to the child.
func (c *Child) Send(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		tb.Fatalf("tell the child process %q: %v", fmt.Sprintf(format, args...), err)
	}
}

// Expect waits, within bound, for the child's line whose first word is
// word and returns the rest of it. A line starting "child:" is logged.
func (c *Child) Expect(tb testing.TB, word string, bound time.Duration) string {
	tb.Helper()
	deadline := time.After(bound)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				tb.Fatalf("the child process ended before saying %q", word)
			}
			if rest, found := strings.CutPrefix(l, word); found && (rest == "" || rest[0] == ' ') {
				return strings.TrimSpace(rest)
			}
			if strings.HasPrefix(l, "child:") || strings.HasPrefix(l, "---") || strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "    ") {
				tb.Logf("child process: %s", l)
			}
		case <-deadline:
			tb.Fatalf("the child process did not say %q within %s", word, bound)
		}
	}
}

// Commands is the child's side: each line its parent sends, until the
// parent closes the child's stdin.
func Commands() <-chan string {
	out := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			out <- sc.Text()
		}
		close(out)
	}()
	return out
}

// Say writes one line to the parent.
func Say(format string, args ...any) { fmt.Printf(format+"\n", args...) }
