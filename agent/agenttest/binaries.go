package agenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Binaries builds meshd and meshctl once per test binary and returns their
// paths. The build lands in a temp dir that outlives the tests of this run.
func Binaries(t testing.TB) (meshd, meshctl string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "meshd-bin")
		if buildErr != nil {
			return
		}
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		for _, c := range []string{"meshd", "meshctl"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, c), "./cmd/"+c)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "meshd"), filepath.Join(buildDir, "meshctl")
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the meshd module")
	}
	return filepath.Dir(mod), nil
}

// Proc is a meshd subprocess with its own config, state dir and socket.
type Proc struct {
	Name, IP, Dir, Socket, Config string
	LogPath                       string
	meshd, meshctl                string
	cmd                           *exec.Cmd
	exited                        chan error
}

// NewProc writes a config for a meshd subprocess on a fresh loopback
// address; Start runs it. It is killed when the test ends.
func NewProc(t testing.TB, name string) *Proc {
	t.Helper()
	meshd, meshctl := Binaries(t)
	ip := TakeIP(t)
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "mshd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	p := &Proc{Name: name, IP: ip, Dir: filepath.Join(dir, "state"), Socket: filepath.Join(sockDir, "s.sock"),
		Config: filepath.Join(dir, "meshd.yaml"), LogPath: filepath.Join(dir, "meshd.log"), meshd: meshd, meshctl: meshctl}
	cfg := fmt.Sprintf("state_dir: %s\nsocket: %s\nbind_addr: %s\nadvertise_addr: %s\nnode_name: %s\nlog_level: debug\n"+
		"raft: {heartbeat_timeout: 200ms, election_timeout: 200ms, leader_lease: 100ms}\n"+
		"overlay_mode: userspace\ntimers: fast\n", p.Dir, p.Socket, ip, ip, name)
	if err := os.WriteFile(p.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, p.Log())
		}
	})
	return p
}

// Start runs meshd and waits until meshctl status answers with a state
// other than "starting".
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(p.meshd, "--config", p.Config)
	p.cmd.Stderr, p.cmd.Stdout = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = logf.Close()
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	backoff := 5 * time.Millisecond
	for {
		// Answering is not enough: a member answers "starting" until its
		// runtime (raft, gossip, overlay) is up.
		var st apitype.Status
		if r := p.Ctl(t, "status", "-o", "json"); r.Exit == 0 && json.Unmarshal([]byte(r.Stdout), &st) == nil && st.State != "starting" {
			return
		}
		select {
		case err := <-p.exited:
			t.Fatalf("meshd %s exited: %v\n%s", p.Name, err, p.Log())
		case <-ctx.Done():
			t.Fatalf("meshd %s did not answer within 20s\n%s", p.Name, p.Log())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// Stop sends SIGTERM and waits for a clean exit.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("meshd %s exited with %v after SIGTERM", p.Name, err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("meshd %s ignored SIGTERM for 20s", p.Name)
		p.Kill()
	}
	p.cmd = nil
}

// Kill ends meshd at once (a crash, not a stop).
func (p *Proc) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

// Log returns everything meshd wrote.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Result is one meshctl run.
type Result struct {
	Stdout, Stderr string
	Exit           int
}

// Ctl runs meshctl against this meshd.
func (p *Proc) Ctl(t testing.TB, args ...string) Result {
	t.Helper()
	return RunCtl(t, append([]string{"--socket", p.Socket}, args...)...)
}

// RunCtl runs meshctl with args and returns what it printed and its exit code.
func RunCtl(t testing.TB, args ...string) Result {
	t.Helper()
	_, meshctl := Binaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, meshctl, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
	default:
		t.Fatalf("meshctl %v: %v", args, err)
	}
	return r
}
