package agenttest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/localclient"
)

// Node is one in-process meshd agent.
type Node struct {
	Name   string
	IP     string // its own loopback address; every listener binds here
	Dir    string // state dir
	Socket string
	Client *localclient.Client
	Clock  *Clock

	cfg config.File
	// file is what a reload reads as the config file (SetConfigFile);
	// it starts as cfg.
	fileMu sync.Mutex
	file   config.File
	logs   *syncBuffer
	// gate is told what meshd tells systemd (READY, STOPPING), once
	// Signal set it.
	gateMu sync.Mutex
	gate   func(state string)
	cancel context.CancelFunc
	done   chan error
}

// NewNode starts an unjoined agent named name on a fresh loopback address.
// It is stopped when the test ends.
func NewNode(t testing.TB, name string, clock *Clock) *Node {
	t.Helper()
	return NewNodeAt(t, name, TakeIP(t), clock)
}

// NewNodeAt is NewNode on a given address (to put a second cluster where
// the first one was).
func NewNodeAt(t testing.TB, name, ip string, clock *Clock, tweak ...func(*config.File)) *Node {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "mshd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	cfg := TestConfig(ip, filepath.Join(t.TempDir(), "state"), filepath.Join(sockDir, "s.sock"))
	for _, f := range tweak {
		f(&cfg)
	}
	n := &Node{Name: name, IP: ip, Dir: cfg.StateDir, Socket: cfg.Socket, Clock: clock, cfg: cfg, file: cfg,
		logs: &syncBuffer{}, Client: &localclient.Client{Socket: cfg.Socket, Version: "test"}}
	n.Start(t)
	t.Cleanup(func() {
		n.Stop(t)
		if t.Failed() {
			t.Logf("logs of %s:\n%s", n.Name, n.Logs())
		}
	})
	return n
}

// DNSPort is a test agent's DNS port, on its loopback address and its
// overlay address alike.
const DNSPort = 10053

// TestConfig is a config for a test agent on ip with short raft timers.
func TestConfig(ip, stateDir, socket string) config.File {
	cfg := config.Default()
	cfg.StateDir, cfg.Socket = stateDir, socket
	cfg.BindAddr, cfg.AdvertiseAddr = ip, ip
	cfg.LogLevel = "debug"
	cfg.OverlayMode, cfg.Timers = "userspace", "fast"
	// Names on the agent's own loopback address, on a port a test may
	// bind without privileges (each agent has its own address).
	cfg.DNS.Loopback, cfg.DNS.Port = ip, DNSPort
	cfg.Raft = config.RaftTiming{HeartbeatTimeout: 200 * time.Millisecond,
		ElectionTimeout: 200 * time.Millisecond, LeaderLease: 100 * time.Millisecond, PromoteTimeout: 3 * time.Second}
	return cfg
}

// Start runs the agent and waits until its socket answers with a state
// other than "starting".
func (n *Node) Start(t testing.TB) {
	t.Helper()
	a, err := agent.New(n.cfg, agent.Deps{Log: n.cfg.NewLogger(n.logs, true),
		Now: n.Clock.Now, Version: "test", Notify: n.notify, ReadConfig: func() (config.File, error) {
			n.fileMu.Lock()
			defer n.fileMu.Unlock()
			return n.file, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- a.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if _, err := n.Client.WaitReady(wctx); err != nil {
		t.Fatalf("%s did not become ready: %v\n%s", n.Name, err, n.Logs())
	}
}

// Stop stops the agent (a restart, not a departure) and waits for it.
func (n *Node) Stop(t testing.TB) {
	t.Helper()
	if n.cancel == nil {
		return
	}
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("%s stopped with %v", n.Name, err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not stop within 20s", n.Name)
	}
	n.cancel = nil
}

// Signal stops the agent as SIGTERM does (cancels Run's context) and
// holds it once it has begun stopping (it told systemd STOPPING) until
// release is called; wait waits for Run to return, as Stop does.
func (n *Node) Signal(t testing.TB) (release, wait func()) {
	t.Helper()
	stopping, held := make(chan struct{}), make(chan struct{})
	n.gateMu.Lock()
	n.gate = func(state string) {
		if state == "STOPPING" {
			close(stopping)
			<-held
		}
	}
	n.gateMu.Unlock()
	n.cancel()
	select {
	case <-stopping:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not begin stopping within 20s", n.Name)
	}
	return func() { close(held) }, func() { n.Stop(t) }
}

// notify is the agent's Deps.Notify: the gate Signal sets, if any.
func (n *Node) notify(state string) {
	n.gateMu.Lock()
	g := n.gate
	n.gateMu.Unlock()
	if g != nil {
		g(state)
	}
}

// SetConfigFile edits what the agent's next reload reads as its config
// file (the running config is not changed until then).
func (n *Node) SetConfigFile(edit func(*config.File)) {
	n.fileMu.Lock()
	defer n.fileMu.Unlock()
	edit(&n.file)
}

// Logs returns everything the agent logged.
func (n *Node) Logs() string { return n.logs.String() }

// Init creates a cluster on this node.
func (n *Node) Init(t testing.TB, cluster string) *apitype.InitResponse {
	t.Helper()
	resp, err := n.Client.Init(t.Context(), apitype.InitRequest{Cluster: cluster, Name: n.Name})
	if err != nil {
		t.Fatalf("init on %s: %v", n.Name, err)
	}
	return resp
}

// Admit mints a token on this node and returns it.
func (n *Node) Admit(t testing.TB, req apitype.AdmitRequest) string {
	t.Helper()
	resp, err := n.Client.Admit(t.Context(), req)
	if err != nil {
		t.Fatalf("admit %s on %s: %v", req.Name, n.Name, err)
	}
	return resp.Token
}

// Join runs a join on this node; steps go to t.Log.
func (n *Node) Join(t testing.TB, token string) (*apitype.JoinResult, error) {
	t.Helper()
	return n.Client.Join(t.Context(), apitype.JoinRequest{Token: token}, func(l apitype.JoinLine) {
		t.Logf("%s join: %s", n.Name, l.Step)
	})
}

// Nodes lists the cluster as this node sees it.
func (n *Node) Nodes(t testing.TB) []apitype.Node {
	t.Helper()
	nodes, err := n.Client.Nodes(t.Context())
	if err != nil {
		t.Fatalf("nodes on %s: %v", n.Name, err)
	}
	return nodes
}

// DirDigest describes every file under the node's state dir (path, mode,
// content), to prove that a failed command changed nothing.
func (n *Node) DirDigest(t testing.TB) string {
	t.Helper()
	var b bytes.Buffer
	err := filepath.WalkDir(n.Dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(n.Dir, p)
		b.WriteString(rel + " " + info.Mode().String())
		if info.Mode().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.Write(c)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
