package raftnode_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

var fast = raftnode.Timing{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
	LeaderLease: 50 * time.Millisecond}

// open starts a raft node called name in dir on a fresh loopback port,
// with a stream layer of ca's control leaves. It is closed when the test
// ends (closing twice is harmless).
func open(t *testing.T, ca *pki.CA, name, dir string) (*raftnode.Node, net.Addr) {
	t.Helper()
	return openLog(t, ca, name, dir, nil)
}

// openLog is open with raft's own lines going to log.
func openLog(t *testing.T, ca *pki.CA, name, dir string, log *slog.Logger) (*raftnode.Node, net.Addr) {
	t.Helper()
	server, client := controlTLS(t, ca, name)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr()
	_ = ln.Close()
	stream, err := raftnode.NewTLSStreamLayer(addr.String(), addr, server, client)
	if err != nil {
		t.Fatal(err)
	}
	n, err := raftnode.Open(raftnode.Options{Dir: dir, NodeID: "id-" + name, Timing: fast, Stream: stream, Log: log})
	if err != nil {
		t.Fatalf("open raft: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n, addr
}

// controlTLS is the raft port's server and client TLS for a control leaf
// of ca called name, judged at pkitest's clock.
func controlTLS(t *testing.T, ca *pki.CA, name string) (server, client *tls.Config) {
	t.Helper()
	id := pkitest.NewIdentity(t, ca, name, pki.RoleControl, pkitest.IP(1))
	server, err := pki.ServerTLSConfig(id, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	client, err = pki.ClientTLSConfig(id, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	server.Time, client.Time = pkitest.Clock(), pkitest.Clock()
	return server, client
}

func bootstrapCmd() *state.Bootstrap {
	return &state.Bootstrap{
		Cluster: state.Cluster{ID: "c1", Name: "alpha", Overlay: pkitest.Overlay},
		Origin:  state.Node{ID: "id-origin", Name: "origin", OverlayIP: pkitest.IP(1).Addr()},
		At:      pkitest.Now,
	}
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// TestSingleVoterLifecycle: a bootstrapped node leads, applies, reports its
// role and membership, refuses to remove its last voter, and after a
// restart waits until its FSM has re-applied what was on disk.
func TestSingleVoterLifecycle(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	dir := filepath.Join(t.TempDir(), "raft")
	if raftnode.HasState(dir) {
		t.Fatal("HasState on an empty dir")
	}
	n, addr := open(t, ca, "origin", dir)
	if err := n.Bootstrap(addr); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if err := n.WaitLeader(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("wait leader: %v", err)
	}
	if !n.IsLeader() || n.LeaderID() != "id-origin" || n.IsShutdown() {
		t.Fatalf("leader %v, leader id %q, shutdown %v", n.IsLeader(), n.LeaderID(), n.IsShutdown())
	}
	if err := n.Apply(ctx(t, 5*time.Second), bootstrapCmd()); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if c, ok := n.FSM().Cluster(); !ok || c.ID != "c1" {
		t.Fatalf("FSM cluster after apply: %+v %v", c, ok)
	}
	// The FSM's answer comes back as the coded error it is.
	if err := n.Apply(ctx(t, 5*time.Second), bootstrapCmd()); codes.Of(err) != codes.AlreadyInitialised {
		t.Fatalf("second bootstrap: %v, want %s", err, codes.AlreadyInitialised)
	}
	if err := n.VerifyLeader(); err != nil {
		t.Fatalf("verify leader: %v", err)
	}
	if r := n.RoleOf("id-origin"); r != raftnode.Leader {
		t.Fatalf("own role %q", r)
	}
	if r := n.RoleOf("id-nobody"); r != raftnode.None {
		t.Fatalf("a stranger's role %q", r)
	}
	if !n.IsVoter("id-origin") || !n.IsMember("id-origin") || n.IsMember("id-nobody") || n.Voters() != 1 {
		t.Fatalf("voter %v member %v stranger member %v voters %d",
			n.IsVoter("id-origin"), n.IsMember("id-origin"), n.IsMember("id-nobody"), n.Voters())
	}
	if err := n.RemoveServer("id-origin", time.Second); codes.Of(err) != codes.QuorumLoss {
		t.Fatalf("removing the last voter: %v, want %s", err, codes.QuorumLoss)
	}
	if err := n.RemoveServer("id-nobody", time.Second); err != nil {
		t.Fatalf("removing a non-member: %v", err)
	}
	if err := n.HandOff(); err != nil {
		t.Fatalf("hand-off with no other voter: %v", err)
	}
	if err := n.HandOffWithin(time.Millisecond); err != nil {
		t.Fatalf("bounded hand-off with no other voter: %v", err)
	}
	if !n.IsLeader() {
		t.Fatal("a lone voter handed its leadership off")
	}
	p := n.Progress()
	if p.LastLogIndex < n.FSM().Index() || p.AppliedIndex < n.FSM().Index() || n.CommitIndex() < n.FSM().Index() {
		t.Fatalf("progress %+v, commit %d behind the FSM's index %d", p, n.CommitIndex(), n.FSM().Index())
	}
	applied := n.FSM().Index()
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	// Restart: raft re-applies the log once it commits in the new term;
	// WaitCaughtUp returns only when the FSM holds what was on disk.
	if !raftnode.HasState(dir) {
		t.Fatal("no raft state after a run")
	}
	n2, _ := open(t, ca, "origin", dir)
	if err := n2.WaitCaughtUp(t.Context(), 10*time.Second); err != nil {
		t.Fatalf("wait caught up: %v", err)
	}
	if got := n2.FSM().Index(); got < applied {
		t.Fatalf("FSM index %d after restart, want >= %d", got, applied)
	}
	if c, ok := n2.FSM().Cluster(); !ok || c.ID != "c1" {
		t.Fatalf("FSM cluster after restart: %+v %v", c, ok)
	}
	if err := n2.WaitApplied(t.Context(), applied); err != nil {
		t.Fatalf("wait applied for an applied index: %v", err)
	}
	if err := n2.WaitApplied(ctx(t, 50*time.Millisecond), applied+100); codes.Of(err) != codes.NoLeader {
		t.Fatalf("wait applied for a future index: %v, want %s", err, codes.NoLeader)
	}
}

// TestWithoutLeader: a node that is not part of any configuration never
// leads; applying, verifying, waiting and membership changes fail with
// codes.NoLeader.
func TestWithoutLeader(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	n, _ := open(t, ca, "lonely", filepath.Join(t.TempDir(), "raft"))
	if n.IsLeader() || n.LeaderID() != "" {
		t.Fatalf("unbootstrapped node: leader %v, leader id %q", n.IsLeader(), n.LeaderID())
	}
	if err := n.Apply(ctx(t, time.Second), bootstrapCmd()); codes.Of(err) != codes.NoLeader {
		t.Fatalf("apply: %v, want %s", err, codes.NoLeader)
	}
	if err := n.VerifyLeader(); codes.Of(err) != codes.NoLeader {
		t.Fatalf("verify leader: %v, want %s", err, codes.NoLeader)
	}
	if err := n.WaitLeader(ctx(t, 300*time.Millisecond)); codes.Of(err) != codes.NoLeader {
		t.Fatalf("wait leader: %v, want %s", err, codes.NoLeader)
	}
	// Membership changes too, so a promotion cut short by a leader change
	// is asked again of the next leader (control.handleRaftJoin).
	if err := n.AddNonvoter("x", "127.0.0.1:1"); codes.Of(err) != codes.NoLeader {
		t.Fatalf("add non-voter: %v, want %s", err, codes.NoLeader)
	}
	if err := n.AddVoter("x", "127.0.0.1:1"); codes.Of(err) != codes.NoLeader {
		t.Fatalf("add voter: %v, want %s", err, codes.NoLeader)
	}
	if len(n.Roles()) != 0 || n.Voters() != 0 {
		t.Fatalf("roles %v, voters %d", n.Roles(), n.Voters())
	}
	if p := n.Progress(); p.LastContact != -1 {
		t.Fatalf("last contact %s, want -1 (never)", p.LastContact)
	}
}

// TestRemoveOnFollowerIsNoLeader: a membership change asked of a member
// that does not lead answers NoLeader (raft's ErrNotLeader), the code on
// which control.removeFromRaft and handleRaftJoin ask the next leader;
// it used to be RaftApply for a removal, which failed a remove whose
// leader lost its leadership mid-way (make test under load, 2026-12-01).
func TestRemoveOnFollowerIsNoLeader(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	leader, addr := open(t, ca, "origin", filepath.Join(t.TempDir(), "raft"))
	if err := leader.Bootstrap(addr); err != nil {
		t.Fatal(err)
	}
	if err := leader.WaitLeader(ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	follower, faddr := open(t, ca, "c2", filepath.Join(t.TempDir(), "raft"))
	if err := leader.AddNonvoter("id-c2", faddr.String()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !follower.IsMember("id-origin") || !follower.IsMember("id-c2") {
		if time.Now().After(deadline) {
			t.Fatal("the follower never learned the configuration")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := follower.RemoveServer("id-c2", time.Second); codes.Of(err) != codes.NoLeader {
		t.Fatalf("remove on a follower: %v, want %s", err, codes.NoLeader)
	}
	if err := follower.AddVoter("id-c2", faddr.String()); codes.Of(err) != codes.NoLeader {
		t.Fatalf("promote on a follower: %v, want %s", err, codes.NoLeader)
	}
	if !leader.IsMember("id-c2") || leader.Voters() != 1 {
		t.Fatal("a refused change changed the configuration")
	}
}

// TestStreamLayerRefusesWorkers: the raft port completes a handshake only
// with a control leaf of the same CA; a worker leaf and a foreign CA's
// control leaf never reach raft.
func TestStreamLayerRefusesWorkers(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	n, addr := open(t, ca, "origin", filepath.Join(t.TempDir(), "raft"))
	if err := n.Bootstrap(addr); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]*pki.Identity{
		"worker":  pkitest.NewIdentity(t, ca, "w1", pki.RoleWorker, pkitest.IP(2)),
		"foreign": pkitest.NewIdentity(t, pkitest.NewCA(t, "other"), "c9", pki.RoleControl, pkitest.IP(3)),
	} {
		conf, err := pki.ClientTLSConfig(id, pki.RoleControl)
		if err != nil {
			t.Fatal(err)
		}
		conf.Time = pkitest.Clock()
		conf.InsecureSkipVerify = true
		conf.VerifyConnection = nil // only the server's decision is under test
		d := &net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(t.Context(), "tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, conf)
		_ = tc.SetDeadline(time.Now().Add(2 * time.Second))
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3: the server's refusal of the client leaf arrives on
			// the first read.
			_, err = tc.Read(make([]byte, 1))
		}
		_ = tc.Close()
		// An accepted connection waits for raft's first request, so the
		// read times out; a refused one ends with the server's alert.
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s leaf was accepted on the raft port (read: %v)", name, err)
		}
	}
}

// TestStreamLayerNotStalledByIdlePeers: connections that never speak TLS
// (60 of them, from other hosts) do not keep a control peer out: its
// handshake completes and Accept hands its connection to raft at once.
// One source cannot hold more than maxHandshakesPerSource handshakes.
func TestStreamLayerNotStalledByIdlePeers(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	server, client := controlTLS(t, ca, "c1")
	s, err := raftnode.NewTLSStreamLayer("127.0.0.1:0", nil, server, client)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.ListenAddr().String()

	for i := range 60 {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%4))} // 15 from each of 4 hosts
		c, err := (&net.Dialer{LocalAddr: src}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := s.Accept(); err == nil {
			accepted <- c
		}
	}()
	start := time.Now()
	c, err := s.Dial(raftAddress(addr), 2*time.Second)
	if err != nil {
		t.Fatalf("a control peer behind 60 idle connections: %v", err)
	}
	defer c.Close()
	select {
	case sc := <-accepted:
		_ = sc.Close()
	case <-time.After(time.Second):
		t.Fatalf("Accept did not hand over the control peer's connection within 1s (60 idle connections parked)")
	}
	t.Logf("control peer accepted %s after it dialled, 60 idle connections parked", time.Since(start).Round(time.Millisecond))

	// One source past its share: closed at once, not held for the deadline.
	src := &net.TCPAddr{IP: net.IPv4(127, 0, 2, 1)}
	var conns []net.Conn
	for range 16 {
		c, err := (&net.Dialer{LocalAddr: src}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	waitClosed := func(c net.Conn) error {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		return err
	}
	extra, err := (&net.Dialer{LocalAddr: src}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := waitClosed(extra); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the 17th idle connection from one source was held (read: %v)", err)
	}
}

type raftAddress = raft.ServerAddress

// TestRaftLogsThroughSlog: a real raft node's own lines reach the slog
// handler it is given, as JSON objects (one a line) at slog levels with
// lib=raft; at info, none of raft's debug lines is printed.
func TestRaftLogsThroughSlog(t *testing.T) {
	var buf raftnode.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil)) // info
	ca := pkitest.NewCA(t, "alpha")
	n, addr := openLog(t, ca, "origin", filepath.Join(t.TempDir(), "raft"), log)
	if err := n.Bootstrap(addr); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if err := n.WaitLeader(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("wait leader: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	leader := false
	for line := range strings.SplitSeq(buf.String(), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not one JSON object: %q: %v", line, err)
		}
		if rec["level"] == "DEBUG" || rec["level"] == "DEBUG-4" {
			t.Errorf("debug line at info: %v", rec)
		}
		if lib, _ := rec["lib"].(string); !strings.HasPrefix(lib, "raft") {
			t.Errorf("record without lib=raft*: %v", rec)
		}
		if rec["msg"] == "entering leader state" && rec["level"] == "INFO" && rec["lib"] == "raft" {
			leader = true
		}
	}
	if !leader {
		t.Errorf("no INFO 'entering leader state' from lib=raft in:\n%s", buf.String())
	}
}

// TestRaftSlotsPerNetwork is issue 27's eighth attack: 8 source
// addresses × 16 silent connections held all 128 handshake slots of the
// raft port, and no control node's dial got through until they timed
// out. Now the share is per source network (an IPv4 /24, an IPv6 /64),
// and raft's configured servers have slots of their own: with the pool
// full from 8 networks, a configured peer still completes its handshake,
// and 8 addresses of one /24 hold 16 slots between them, not 128.
func TestRaftSlotsPerNetwork(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	server, client := controlTLS(t, ca, "c1")
	peer := netip.MustParseAddr("127.0.0.1")
	s, err := raftnode.NewTLSStreamLayer("127.0.0.1:0", nil, server, client,
		raftnode.WithPeers(func() []netip.Addr { return []netip.Addr{peer} }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.ListenAddr().String()
	dial := func(ip net.IP) net.Conn {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// Still open after a second: it holds a slot (a held handshake ends
	// only at its 3 s deadline; one past the bound is closed as soon as
	// the accept loop reaches it, which a second leaves ample time for).
	held := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, os.ErrDeadlineExceeded)
	}

	// One /24, 8 addresses, 16 connections each: 16 held in all.
	var same []net.Conn
	for i := range 8 * 16 {
		same = append(same, dial(net.IPv4(127, 0, 3, byte(1+i%8))))
	}
	var n atomic.Int64 // checked at once: a held handshake ends at its 3 s deadline
	var wg sync.WaitGroup
	for _, c := range same {
		wg.Go(func() {
			if held(c) {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if n.Load() != 16 {
		t.Errorf("8 addresses of one /24 hold %d handshake slots, want 16", n.Load())
	}
	for _, c := range same {
		_ = c.Close()
	}

	// 8 networks, 16 each: the shared pool (128) is full.
	for i := range 8 * 16 {
		dial(net.IPv4(127, 0, byte(10+i%8), 1))
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := s.Accept(); err == nil {
			accepted <- c
		}
	}()
	c, err := s.Dial(raftAddress(addr), 2*time.Second)
	if err != nil {
		t.Fatalf("a configured peer behind a full pool: %v", err)
	}
	defer c.Close()
	select {
	case sc := <-accepted:
		_ = sc.Close()
	case <-time.After(time.Second):
		t.Fatal("Accept did not hand over the configured peer's connection within 1 s")
	}
}

// TestStreamLayerCloseCutsOpenConns: closing the layer ends the raft
// connections it accepted, not only the listener. raft's transport leaves
// them open, and a heartbeat read on one after raft shut down made raft
// save its term in a closed store (a panic in control's tests).
func TestStreamLayerCloseCutsOpenConns(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	server, client := controlTLS(t, ca, "c1")
	s, err := raftnode.NewTLSStreamLayer("127.0.0.1:0", nil, server, client)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := s.Accept(); err == nil {
			accepted <- c
		}
	}()
	peer, err := raftnode.NewTLSStreamLayer("127.0.0.1:0", nil, server, client) // another server, dialling
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := peer.Dial(raftAddress(s.ListenAddr().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("no connection accepted within 2 s")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the peer's connection still open 2 s after the layer closed (read: %v)", err)
	}
}
