package agenttest_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// expectCode checks meshctl's failure contract: exit 1, the code and cause
// first on stderr, a remedy line next.
func expectCode(t *testing.T, r agenttest.Result, want codes.Code, exit int) {
	t.Helper()
	lines := strings.Split(r.Stderr, "\n")
	if r.Exit != exit || len(lines) < 2 || lines[0] != string(want)+": "+want.Cause() ||
		lines[1] != "remedy: "+want.Remedy() {
		t.Fatalf("want exit %d and %s first on stderr, got exit %d:\n%s", exit, want, r.Exit, r.Stderr)
	}
}

// TestCLIContract drives real meshd and meshctl binaries exactly as a
// person or script would (DESIGN §8).
func TestCLIContract(t *testing.T) {
	// No daemon: exit 3 with the unreachable code.
	r := agenttest.RunCtl(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "status")
	expectCode(t, r, codes.DaemonUnreachable, 3)

	// Usage mistakes exit 2; explain works offline.
	if r := agenttest.RunCtl(t, "admit"); r.Exit != 2 {
		t.Fatalf("admit without a name: exit %d, want 2", r.Exit)
	}
	if r := agenttest.RunCtl(t, "nodes", "--bogus"); r.Exit != 2 {
		t.Fatalf("unknown flag: exit %d, want 2", r.Exit)
	}
	r = agenttest.RunCtl(t, "explain", string(codes.TokenConsumed))
	if r.Exit != 0 || !strings.Contains(r.Stdout, codes.TokenConsumed.Remedy()) {
		t.Fatalf("explain: exit %d\n%s", r.Exit, r.Stdout)
	}
	expectCode(t, agenttest.RunCtl(t, "explain", "X999999NOSUCH"), codes.UnknownCode, 1)

	origin := agenttest.NewProc(t, "origin")
	origin.Start(t)
	w1 := agenttest.NewProc(t, "w1")
	w1.Start(t)
	w2 := agenttest.NewProc(t, "w2")
	w2.Start(t)

	// An unjoined agent: status exits 0 and says so; nodes needs a cluster.
	r = w1.Ctl(t, "status")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "has not joined") {
		t.Fatalf("unjoined status: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	expectCode(t, w1.Ctl(t, "nodes"), codes.NotInCluster, 1)

	if r := origin.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: exit %d\n%s", r.Exit, r.Stderr)
	}
	expectCode(t, origin.Ctl(t, "init", "--cluster", "alpha"), codes.AlreadyInitialised, 1)
	expectCode(t, origin.Ctl(t, "admit", "Bad_Name"), codes.BadNodeName, 1)
	expectCode(t, origin.Ctl(t, "admit", "x", "--ttl", "2h"), codes.TokenBadTTL, 1)

	// admit prints the token alone on stdout's last line; -o json gives {"token": ...}.
	r = origin.Ctl(t, "admit", "w1")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	tok1 := lines[len(lines)-1]
	if r.Exit != 0 || !strings.HasPrefix(tok1, "mesh1_") {
		t.Fatalf("admit: exit %d, last line %q", r.Exit, tok1)
	}
	r = origin.Ctl(t, "admit", "w2", "-o", "json")
	var admitted struct{ Token string }
	if err := json.Unmarshal([]byte(r.Stdout), &admitted); err != nil || !strings.HasPrefix(admitted.Token, "mesh1_") {
		t.Fatalf("admit -o json: %v\n%s", err, r.Stdout)
	}

	r = w1.Ctl(t, "join", tok1)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "seed verified") || !strings.Contains(r.Stdout, "joined cluster") {
		t.Fatalf("join: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	expectCode(t, w1.Ctl(t, "join", admitted.Token), codes.AlreadyJoined, 1)
	expectCode(t, w2.Ctl(t, "join", tok1), codes.TokenConsumed, 1)
	expectCode(t, w2.Ctl(t, "join", admitted.Token[:40]), codes.TokenCorrupt, 1)
	if r := w2.Ctl(t, "join", admitted.Token); r.Exit != 0 {
		t.Fatalf("join w2: exit %d\n%s", r.Exit, r.Stderr)
	}

	nodes := nodesJSON(t, origin)
	if len(nodes) != 3 {
		t.Fatalf("nodes -o json: %d nodes, want 3", len(nodes))
	}
	for _, n := range nodes {
		for _, field := range []string{"name", "role", "state", "gossip", "overlay_ip", "underlay_addr", "raft", "cert_expires", "version"} {
			if _, ok := n[field]; !ok {
				t.Errorf("node %v lacks field %q", n["name"], field)
			}
		}
	}
	if r := origin.Ctl(t, "nodes"); r.Exit != 0 || !strings.Contains(r.Stdout, "OVERLAY") || !strings.Contains(r.Stdout, "w2") {
		t.Fatalf("nodes table: exit %d\n%s", r.Exit, r.Stdout)
	}
	var toks []apitype.Token
	if r := origin.Ctl(t, "tokens", "-o", "json"); r.Exit != 0 || json.Unmarshal([]byte(r.Stdout), &toks) != nil || len(toks) != 2 {
		t.Fatalf("tokens -o json: exit %d\n%s", r.Exit, r.Stdout)
	}

	// A restart of the origin (SIGTERM, start again) keeps the cluster.
	origin.Stop(t)
	origin.Start(t)
	after := nodesJSON(t, origin)
	if len(after) != 3 {
		t.Fatalf("after restart: %d nodes", len(after))
	}

	for _, p := range []*agenttest.Proc{origin, w1, w2} {
		for _, secret := range []string{tok1, admitted.Token} {
			if strings.Contains(p.Log(), secret[6:]) {
				t.Errorf("%s's log contains a token", p.Name)
			}
		}
	}
}

func nodesJSON(t *testing.T, p *agenttest.Proc) []map[string]any {
	t.Helper()
	r := p.Ctl(t, "nodes", "-o", "json")
	var nodes []map[string]any
	if r.Exit != 0 || json.Unmarshal([]byte(r.Stdout), &nodes) != nil {
		t.Fatalf("nodes -o json: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	return nodes
}

// TestMeshdRefusesBadConfig: an unknown key or a bad value stops meshd
// before it touches anything, with the code and the field named.
func TestMeshdRefusesBadConfig(t *testing.T) {
	meshd, _ := agenttest.Binaries(t)
	for name, body := range map[string]string{
		"unknown-key": "state_dir: STATE\nsocket: /tmp/x.sock\nbogus_key: 1\n",
		"bad-value":   "state_dir: STATE\nsocket: /tmp/x.sock\noverlay_cidr: 10.42.0.1/33\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			cfg := filepath.Join(dir, "meshd.yaml")
			if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(body, "STATE", state)), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(meshd, "--config", cfg).CombinedOutput()
			var ee *exec.ExitError
			if !errorsAs(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("meshd exit: %v\n%s", err, out)
			}
			if !strings.HasPrefix(string(out), string(codes.ConfigInvalid)) {
				t.Fatalf("output does not start with %s:\n%s", codes.ConfigInvalid, out)
			}
			field := map[string]string{"unknown-key": "bogus_key", "bad-value": "overlay_cidr"}[name]
			if !strings.Contains(string(out), field) {
				t.Fatalf("output does not name %s:\n%s", field, out)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Fatalf("state dir was created: %v", err)
			}
		})
	}
}

func errorsAs(err error, target **exec.ExitError) bool { return errors.As(err, target) }

// TestWrongGossipKey: a node whose gossip key is not the cluster's is
// refused by the cluster; its log and `meshctl status` carry
// codes.GossipKey, not a bare EOF. Its record is active, so it then
// fetches the cluster's keyring over mTLS and is alive again.
func TestWrongGossipKey(t *testing.T) {
	origin := agenttest.NewProc(t, "origin")
	origin.Start(t)
	w1 := agenttest.NewProc(t, "w1")
	// w1 in the gossip pool (a worker is out of it by default): a wrong
	// key matters only there.
	f, err := os.OpenFile(w1.Config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("gossip_pool: true\n"); err != nil || f.Close() != nil {
		t.Fatal(err)
	}
	w1.Start(t)
	if r := origin.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: %s", r.Stderr)
	}
	r := origin.Ctl(t, "admit", "w1")
	tok := strings.TrimSpace(r.Stdout[strings.LastIndex(strings.TrimSpace(r.Stdout), "\n")+1:])
	if r := w1.Ctl(t, "join", tok); r.Exit != 0 {
		t.Fatalf("join: %s", r.Stderr)
	}
	w1.Stop(t)

	// Give w1 a key the cluster does not have.
	path := filepath.Join(w1.Dir, "node.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var facts map[string]any
	if err := json.Unmarshal(raw, &facts); err != nil {
		t.Fatal(err)
	}
	facts["gossip_keys"] = []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, 32))}
	raw, _ = json.Marshal(facts)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	w1.Start(t)

	agenttest.WaitFor(t, t.Context(), 15*time.Second, func() error {
		var st apitype.Status
		r := w1.Ctl(t, "status", "-o", "json")
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
			return err
		}
		for _, w := range st.Warnings {
			if w.Code == codes.GossipKey {
				return nil
			}
		}
		return fmt.Errorf("no %s warning in status yet: %+v", codes.GossipKey, st.Warnings)
	})
	if !strings.Contains(w1.Log(), string(codes.GossipKey)) {
		t.Errorf("w1's log does not carry %s", codes.GossipKey)
	}
	// w1's record is active, so it fetches the cluster's keyring over
	// mTLS (keys never travel over gossip) and is alive again.
	agenttest.WaitFor(t, t.Context(), 15*time.Second, func() error {
		for _, n := range nodesJSON(t, origin) {
			if n["name"] == "w1" && n["gossip"] != "alive" {
				return fmt.Errorf("origin sees w1 %v", n["gossip"])
			}
		}
		return nil
	})
}
