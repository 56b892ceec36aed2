package agenttest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/codes"
)

// runMeshd runs meshd once with cfg and returns its exit code and output;
// for a meshd that is expected to refuse to start.
func runMeshd(t *testing.T, cfg string) (int, string) {
	t.Helper()
	meshd, _ := agenttest.Binaries(t)
	out, err := exec.CommandContext(t.Context(), meshd, "--config", cfg).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errorsAs(err, &ee):
		return ee.ExitCode(), string(out)
	default:
		t.Fatalf("meshd: %v", err)
		return 0, ""
	}
}

// TestDoubleStartAndStaleSocket: a second meshd on the same state dir, or
// on the same socket, is refused with codes.AlreadyRunning naming the
// first one's PID and leaves the first one serving; the socket and lock
// file a kill -9 leaves behind do not stop the next start.
func TestDoubleStartAndStaleSocket(t *testing.T) {
	p := agenttest.NewProc(t, "solo")
	p.Start(t)
	if r := p.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: %s", r.Stderr)
	}
	pidBytes, err := os.ReadFile(filepath.Join(p.Dir, "meshd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidBytes)))
	if err != nil || pid <= 0 {
		t.Fatalf("meshd.pid holds %q", pidBytes)
	}
	cfgBody, err := os.ReadFile(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	otherSock := filepath.Join(t.TempDir(), "other.sock")
	otherState := filepath.Join(t.TempDir(), "other-state")
	cases := map[string]string{
		"same-config":                 string(cfgBody),
		"same-state-dir-other-socket": strings.Replace(string(cfgBody), "socket: "+p.Socket, "socket: "+otherSock, 1),
		"same-socket-other-state-dir": strings.Replace(string(cfgBody), "state_dir: "+p.Dir, "state_dir: "+otherState, 1),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			if body == string(cfgBody) && name != "same-config" {
				t.Fatalf("the config was not changed: %s", body)
			}
			exit, out := runMeshd(t, write("meshd.yaml", body))
			if exit != 1 || !strings.HasPrefix(out, string(codes.AlreadyRunning)) {
				t.Fatalf("second meshd: exit %d, want 1 with %s:\n%s", exit, codes.AlreadyRunning, out)
			}
			if !strings.Contains(out, fmt.Sprintf("pid %d", pid)) {
				t.Fatalf("refusal does not name pid %d:\n%s", pid, out)
			}
			if _, err := os.Stat(otherSock); !os.IsNotExist(err) {
				t.Fatalf("the refused meshd left a socket at %s: %v", otherSock, err)
			}
			// The first one still serves, on its own socket.
			if r := p.Ctl(t, "status"); r.Exit != 0 {
				t.Fatalf("first meshd stopped answering: %s", r.Stderr)
			}
		})
	}

	// kill -9 leaves the socket file and meshd.pid behind.
	p.Kill()
	if st, err := os.Lstat(p.Socket); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("after kill -9 the socket file should be left: %v", err)
	}
	p.Start(t)
	r := p.Ctl(t, "status")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "alpha") {
		t.Fatalf("restart over a stale socket: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	b, _ := os.ReadFile(filepath.Join(p.Dir, "meshd.pid"))
	if strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
		t.Fatalf("meshd.pid still holds the killed pid %d", pid)
	}
}
