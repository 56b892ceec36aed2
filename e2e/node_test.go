//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/meshd/meshd/agent/apitype"
)

// binDir holds meshd and meshctl, built once by TestMain.
var binDir string

// suiteTimers is the meshd `timers` setting of a node on a Net whose
// Timers is empty: the suite's fast ones.
const suiteTimers = "fast"

// Node is a meshd process in its own namespace.
type Node struct {
	*Host
	NodeName string
	Dir      string
	Socket   string
	Config   string
	LogPath  string
	// Env is added to meshd's environment at Start (for example
	// MESHD_CPUPROFILE=FILE, which a benchmark reads after Stop).
	Env []string
	// MachineID, if set, is a file bind-mounted over /etc/machine-id in
	// a mount namespace of meshd's own (unshare -m): another machine, as
	// far as meshd can tell.
	MachineID string
	// Bin, if set, is the meshd binary Start runs instead of the release
	// build (the crash-point build of crash_test.go).
	Bin string
	// CtlBin, if set, is the meshctl binary Ctl runs instead of the
	// release build (the previous release's, in TestRollingUpgrade).
	CtlBin string
	cmd    *exec.Cmd
	exited chan error
}

// NewNode adds a host to n and writes a meshd config for it; Start runs it.
func (n *Net) NewNode(name string) *Node {
	n.t.Helper()
	return n.NewNodeOn(n.AddHost(name), name)
}

// NewNodeOn writes a meshd config for a node named name on host h (from
// AddHostWith); Start runs it.
func (n *Net) NewNodeOn(h *Host, name string) *Node {
	n.t.Helper()
	nd := n.newNodeDir(h, name)
	cfg := fmt.Sprintf(`state_dir: %s
socket: %s
node_name: %s
log_level: debug
timers: %s
`, nd.Dir, nd.Socket, name, cmp.Or(n.Timers, suiteTimers))
	if !n.Unpinned {
		cfg += fmt.Sprintf("bind_addr: %s\nadvertise_addr: %s\n", h.IP, h.IP)
	}
	if !n.DefaultRaft {
		cfg += "raft: {heartbeat_timeout: 300ms, election_timeout: 300ms, leader_lease: 150ms}\n"
	}
	cfg += n.ExtraConfig
	if err := os.WriteFile(nd.Config, []byte(cfg), 0o600); err != nil {
		n.t.Fatal(err)
	}
	if n.ProfileDir != "" {
		nd.Env = append(nd.Env, "MESHD_CPUPROFILE="+filepath.Join(n.ProfileDir, name+".cpu"))
	}
	return nd
}

// newNodeDir is a Node on h with its files in a fresh short temporary
// directory (the socket path must stay short), none written yet; the node
// is killed and the directory removed when the test ends, and its log
// shown if the test failed.
func (n *Net) newNodeDir(h *Host, name string) *Node {
	n.t.Helper()
	dir, err := os.MkdirTemp("", "mshe")
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	nd := &Node{Host: h, NodeName: name, Dir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "s.sock"),
		Config: filepath.Join(dir, "meshd.yaml"), LogPath: filepath.Join(dir, "meshd.log")}
	n.t.Cleanup(func() {
		nd.Kill()
		if n.t.Failed() {
			b, _ := os.ReadFile(nd.LogPath)
			n.t.Logf("log of %s:\n%s", name, b)
		}
	})
	return nd
}

// packagedConfig is the meshd.yaml the packages install as
// /etc/meshd/meshd.yaml (every key commented out at its default).
const packagedConfig = "../packaging/config/meshd.yaml"

// NewInstalledNode adds a host to n whose node runs meshd as installed:
// the packaged meshd.yaml unchanged, so every key keeps its default
// (bind_addr 0.0.0.0, no advertise_addr, timers lan, log_level info, raft
// at its default timing), plus only state_dir and socket, which the
// package's systemd unit would give it and which several nodes on one
// machine must not share. Net.Timers, DefaultRaft and ExtraConfig do not
// apply; extra, if not empty, is appended (a benchmark varying one
// setting), with every "{ip}" replaced by the host's underlay address.
// The node has no node_name: `meshctl init --name` names an origin, a
// token a joiner.
func (n *Net) NewInstalledNode(name, extra string) *Node {
	n.t.Helper()
	pkg, err := os.ReadFile(packagedConfig)
	if err != nil {
		n.t.Fatal(err)
	}
	h := n.AddHost(name)
	nd := n.newNodeDir(h, name)
	cfg := fmt.Sprintf("%s\n# Added by the e2e harness: this node's own paths.\nstate_dir: %s\nsocket: %s\n",
		pkg, nd.Dir, nd.Socket)
	cfg += strings.ReplaceAll(extra, "{ip}", h.IP)
	if err := os.WriteFile(nd.Config, []byte(cfg), 0o600); err != nil {
		n.t.Fatal(err)
	}
	return nd
}

// Start runs meshd in the node's namespace and waits for its socket.
func (nd *Node) Start(t testing.TB) {
	t.Helper()
	if err := nd.start(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// start is Start for use off the test goroutine: it returns what Start
// fails the test with.
func (nd *Node) start(ctx context.Context) error {
	logf, err := os.OpenFile(nd.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	meshd := cmp.Or(nd.Bin, filepath.Join(binDir, "meshd"))
	nd.cmd = exec.Command("ip", "netns", "exec", nd.Name, meshd, "--config", nd.Config)
	if nd.MachineID != "" {
		// unshare execs sh, sh execs ip, ip execs meshd: one pid, so
		// Stop and Kill signal meshd itself. Mounts made in the new
		// namespace stay private to it.
		nd.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$0" /etc/machine-id && exec ip netns exec "$1" "$2" --config "$3"`,
			nd.MachineID, nd.Name, meshd, nd.Config)
	}
	nd.cmd.Stdout, nd.cmd.Stderr = logf, logf
	if len(nd.Env) > 0 {
		nd.cmd.Env = append(os.Environ(), nd.Env...)
	}
	if err := nd.cmd.Start(); err != nil {
		_ = logf.Close()
		nd.cmd = nil
		return err
	}
	_ = logf.Close()
	nd.exited = make(chan error, 1)
	go func() { nd.exited <- nd.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st apitype.Status
		if err := nd.CtlJSON(ctx, &st, "status"); err == nil && st.State != "starting" {
			return nil
		}
		select {
		case err := <-nd.exited:
			nd.cmd = nil
			return fmt.Errorf("meshd %s exited: %v", nd.NodeName, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("meshd %s did not answer within 20s", nd.NodeName)
		}
	}
}

// Kill ends meshd with SIGKILL: a crash, not a stop.
func (nd *Node) Kill() {
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Signal(syscall.SIGKILL)
	<-nd.exited
	nd.cmd = nil
}

// Stop sends SIGTERM and waits.
func (nd *Node) Stop(t testing.TB) {
	t.Helper()
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nd.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("meshd %s ignored SIGTERM for 20s; SIGQUIT for a goroutine dump (in its log)", nd.NodeName)
		_ = nd.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-nd.exited:
		case <-time.After(5 * time.Second):
			nd.Kill()
		}
	}
	nd.cmd = nil
}

// Ctl runs meshctl in the node's namespace; it returns stdout, stderr and
// the exit code.
func (nd *Node) Ctl(ctx context.Context, args ...string) (string, string, int) {
	return nd.ctl(ctx, nd.CtlBin, args...)
}

// ctl is Ctl with meshctl binary bin ("" for the release build).
func (nd *Node) ctl(ctx context.Context, bin string, args ...string) (string, string, int) {
	cmd := nd.Exec(ctx, cmp.Or(bin, filepath.Join(binDir, "meshctl")), append([]string{"--socket", nd.Socket}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	if err != nil {
		return out.String(), err.Error(), -1
	}
	return out.String(), errb.String(), 0
}

// CtlJSON runs `meshctl ARGS -o json` and decodes stdout into v.
func (nd *Node) CtlJSON(ctx context.Context, v any, args ...string) error {
	out, errs, code := nd.Ctl(ctx, append(args, "-o", "json")...)
	if code != 0 {
		return fmt.Errorf("meshctl %v: exit %d: %s", args, code, errs)
	}
	return json.Unmarshal([]byte(out), v)
}

// MustCtl runs meshctl and fails the test unless it exits 0.
func (nd *Node) MustCtl(t testing.TB, args ...string) string {
	t.Helper()
	out, errs, code := nd.Ctl(t.Context(), args...)
	if code != 0 {
		t.Fatalf("%s: meshctl %v: exit %d\n%s%s", nd.NodeName, args, code, out, errs)
	}
	return out
}

// Nodes is `meshctl nodes -o json` on this node.
func (nd *Node) Nodes(t testing.TB) []apitype.Node {
	t.Helper()
	var ns []apitype.Node
	if err := nd.CtlJSON(t.Context(), &ns, "nodes"); err != nil {
		t.Fatal(err)
	}
	return ns
}

// Admit mints a token on this node.
func (nd *Node) Admit(t testing.TB, name string, extra ...string) string {
	t.Helper()
	var r struct{ Token string }
	if err := nd.CtlJSON(t.Context(), &r, append([]string{"admit", name}, extra...)...); err != nil {
		t.Fatal(err)
	}
	return r.Token
}

// AdmitFirstAt mints tokens for name on nd until one names first the seed
// on underlay IP first (each token starts its seed list at a control node
// its hash picks), revoking the others, and returns it: a test that arms
// or breaks one control node needs the join to meet it first.
func (nd *Node) AdmitFirstAt(t testing.TB, first, name string, extra ...string) string {
	t.Helper()
	for range 40 {
		var r struct {
			Token, ID string
			Seeds     []string
		}
		if err := nd.CtlJSON(t.Context(), &r, append([]string{"admit", name}, extra...)...); err != nil {
			t.Fatal(err)
		}
		if len(r.Seeds) > 0 && strings.HasPrefix(r.Seeds[0], first+":") {
			return r.Token
		}
		nd.MustCtl(t, "tokens", "revoke", r.ID)
	}
	t.Fatalf("40 tokens minted on %s for %s, none naming %s first", nd.NodeName, name, first)
	return ""
}

// Eventually polls cond until it succeeds or d passes, then fails the test.
// It returns how long it took.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	took, err := waitFor(t.Context(), d, cond)
	if err != nil {
		t.Fatalf("%s: not within %s: %v", what, d, err)
	}
	return took
}

// waitFor polls cond with backoff until it succeeds or d passes; safe to
// call from any goroutine.
func waitFor(ctx context.Context, d time.Duration, cond func() error) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// gossipFailBound is how long, with the gossip timers of n's nodes
// (Net.Timers), every one of members gossip members may take to see a
// member that stopped answering (killed, cut off, or left holding a key
// rotated away) as no longer alive. It is gossip.failBound's sum
// (gossip/scale_test.go) for the timers meshd runs: 2 probe intervals
// until some member's probe of it has failed and it is suspected;
// memberlist's suspicion timeout unconfirmed, its longest (the gossip
// simulation saw more than the confirmed minimum on an idle machine); the
// dead message's retransmissions, one per gossip interval. Fast timers,
// 3 or 4 members: 0.4 + 2.4 + 0.4 = 3.2 s.
func (n *Net) gossipFailBound(members int) time.Duration {
	ml := n.memberlistConfig()
	scale := max(1, math.Log10(float64(members)))
	suspicion := time.Duration(float64(ml.SuspicionMult) * scale * float64(ml.ProbeInterval) * float64(max(1, ml.SuspicionMaxTimeoutMult)))
	retransmits := ml.RetransmitMult * int(math.Ceil(math.Log10(float64(members+1))))
	return 2*ml.ProbeInterval + suspicion + time.Duration(retransmits)*ml.GossipInterval
}

// memberlistConfig is the memberlist timing of n's nodes: timers lan is
// memberlist's LAN config with gossip/config.go's 500 ms gossip tick
// (lanGossipInterval); fast, gossip/config.go's.
func (n *Net) memberlistConfig() *memberlist.Config {
	ml := memberlist.DefaultLANConfig()
	ml.GossipInterval = 500 * time.Millisecond
	if cmp.Or(n.Timers, "fast") == "fast" {
		ml.ProbeInterval, ml.ProbeTimeout, ml.SuspicionMult, ml.GossipInterval = 200*time.Millisecond, 100*time.Millisecond, 2, 100*time.Millisecond
	}
	return ml
}

// probeRounds is how long, with n's gossip timers, rounds full rounds of
// memberlist's probes take among members gossip members: each round a
// member probes every other once, one probe interval each, and the last
// probe gets its probe timeout to fail.
func (n *Net) probeRounds(members, rounds int) time.Duration {
	ml := n.memberlistConfig()
	return time.Duration(rounds*(members-1))*ml.ProbeInterval + ml.ProbeTimeout
}
