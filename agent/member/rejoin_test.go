package member

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/loopbacktest"
)

// peersFacts are cluster facts that name a fixed list of gossip peers.
type peersFacts struct {
	clusterFacts // nil: only SerfPeers is called
	peers        []string
}

func (f peersFacts) SerfPeers() []string { return f.peers }

// syncBuffer is a log sink the test reads while gossip still writes.
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

// startLoopGossip runs a gossip node on its own loopback address, on the
// port the test's membership takes as every node's gossip port.
func startLoopGossip(t *testing.T, name string, port int, key []byte, log *slog.Logger) *gossip.Gossip {
	t.Helper()
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.Keys, cfg.Fast = name, loopbacktest.TakeIP(t, "127.82"), port, [][]byte{key}, true
	cfg.Tags = map[string]string{tagID: "id-" + name, tagRole: "worker"}
	cfg.Log = log
	g, err := gossip.New(cfg)
	if err != nil {
		t.Fatalf("gossip %s: %v", name, err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	return g
}

// unanswering returns an address on the loopback whose TCP port accepts
// no connection and refuses none: a listener with a full accept queue, on
// which the kernel drops every further SYN (as a peer behind a dead
// tunnel does). The probe to it runs until reachProbe.
func unanswering(t *testing.T, port int) string {
	t.Helper()
	ip := loopbacktest.TakeIP(t, "127.82")
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	sa := &syscall.SockaddrInet4{Port: port}
	copy(sa.Addr[:], netip.MustParseAddr(ip).AsSlice())
	if err := syscall.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	for range 8 { // fill the queue until a connection is no longer taken
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	t.Fatalf("%s still accepts connections with its accept queue never read", addr)
	return ""
}

// TestRejoinJoinsTheFirstAnswer: a node that knows peers it does not
// see joins the first that answers its overlay probe; one push-pull brings
// the whole membership, so the others that are up are then seen alive and
// not joined (7911c14: the rejoin used to wait for every probe, then
// push-pull with each in turn). A peer that never answers holds the
// rejoin no longer than its probe's bound, and stays missing.
func TestRejoinJoinsTheFirstAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		down bool // a third peer whose probe never answers
	}{{"all up", false}, {"one never answers", true}} {
		t.Run(tc.name, func(t *testing.T) {
			key := make([]byte, 32)
			const port = 7955
			discard := slog.New(slog.DiscardHandler)
			b := startLoopGossip(t, "b", port, key, discard)
			c := startLoopGossip(t, "c", port, key, discard)
			if _, err := c.Join(t.Context(), []string{b.LocalMember().Addr.String()}); err != nil {
				t.Fatalf("c joins b: %v", err)
			}
			// c's Join returns once it read b's state; b merges c's after it
			// sent its own, so until then a's push-pull with b would not
			// bring c (the test failed 1 run in 8 on a loaded box that way).
			waitUntil(t, 5*time.Second, "b sees c alive", func() bool {
				return slices.ContainsFunc(b.Members(), func(m gossip.Member) bool {
					return m.Name == "c" && m.Status == gossip.StatusAlive
				})
			})
			peers := []string{b.LocalMember().Addr.String(), c.LocalMember().Addr.String()}
			var want []string // missing after the rejoin
			if tc.down {
				dead := unanswering(t, port)
				peers, want = append(peers, dead), []string{dead}
			}

			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			a := startLoopGossip(t, "a", port, key, discard)
			nd := &node{cluster: peersFacts{peers: peers}, log: log, gossip: a, ports: config.Ports{Gossip: port},
				facts: &statedir.Facts{Overlay: netip.MustParsePrefix(a.LocalMember().Addr.Addr().String() + "/8")}}
			ms := &membership{node: nd, ov: &overlay{node: nd}, keys: &keyring{node: nd}}

			start := time.Now()
			ctx, cancel := context.WithTimeout(t.Context(), 3*reachProbe)
			defer cancel()
			if !ms.rejoin(ctx) {
				t.Fatal("rejoin says no peer was missing; all were")
			}
			took := time.Since(start)
			if missing := ms.missingPeers(); !slices.Equal(missing, want) {
				t.Errorf("missing after the rejoin = %v, want %v", missing, want)
			}
			if n := strings.Count(logs.String(), "gossip joined a known peer it did not see"); n != 1 {
				t.Errorf("joined %d peers, want 1 (one push-pull brings the membership):\n%s", n, logs.String())
			}
			if bound := reachProbe / 2; !tc.down && took >= bound {
				t.Errorf("rejoin took %s with every peer up, want < %s", took, bound)
			}
			if bound := reachProbe + time.Second; took >= bound {
				t.Errorf("rejoin took %s, want < %s (the unanswered probe's bound)", took, bound)
			}
			t.Logf("rejoin joined one peer and returned after %s", took)
		})
	}
}
