package gossip

import (
	"context"
	crand "crypto/rand"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshd/meshd/loopbacktest"
)

var gossipLogs = flag.Bool("gossiplogs", false, "send serf/memberlist logs (debug level) to the test output")

// awaitTimeout bounds each wait for an event; the test's own deadline (from
// t.Context()) still applies.
const awaitTimeout = 15 * time.Second

// TestMain checks, after every test, that no goroutine is left behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// takeIP reserves a loopback address in 127.78.0.0/16 until the test ends,
// so every node can use the default port 7946.
func takeIP(tb testing.TB) string { return loopbacktest.TakeIP(tb, "127.78") }

// newKey returns a fresh 32-byte gossip key.
func newKey(tb testing.TB) []byte {
	tb.Helper()
	k := make([]byte, 32)
	if _, err := crand.Read(k); err != nil {
		tb.Fatal(err)
	}
	return k
}

// testConfig is a Fast config for a node on its own loopback address.
func testConfig(tb testing.TB, name string, keys ...[]byte) Config {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.BindAddr = takeIP(tb)
	cfg.Keys = keys
	cfg.Tags = map[string]string{"id": "id-" + name, "role": "worker"}
	cfg.Fast = true
	cfg.Log = testLogger(tb, name)
	return cfg
}

func testLogger(tb testing.TB, name string) *slog.Logger {
	if !*gossipLogs {
		return slog.New(slog.DiscardHandler)
	}
	h := slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h).With("node", name)
}

// node is a running Gossip plus every event it has delivered so far, so
// waits never lose events meant for a later wait.
type node struct {
	cfg    Config
	g      *Gossip
	events []Event
}

// start runs New(cfg) and shuts the node down when the test ends.
func start(tb testing.TB, cfg Config) *node {
	tb.Helper()
	g, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%s): %v", cfg.Name, err)
	}
	tb.Cleanup(func() { _ = g.Shutdown() })
	return &node{cfg: cfg, g: g}
}

// addr is the host:port others join this node on.
func (n *node) addr() string {
	a, p := n.cfg.advertise()
	return net.JoinHostPort(a, fmt.Sprint(p))
}

// mark returns a position in the event history for await's since.
func (n *node) mark() int { return len(n.events) }

// await waits until, at or after history position since, an event of kind
// has named each of names. It returns the latest such event's time.
func (n *node) await(tb testing.TB, since int, kind EventKind, names ...string) time.Time {
	tb.Helper()
	pending := make(map[string]bool, len(names))
	for _, name := range names {
		pending[name] = true
	}
	var last time.Time
	match := func(ev Event) {
		if ev.Kind != kind {
			return
		}
		for _, m := range ev.Members {
			if pending[m.Name] {
				delete(pending, m.Name)
				last = ev.At
			}
		}
	}
	for _, ev := range n.events[since:] {
		match(ev)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), awaitTimeout)
	defer cancel()
	for len(pending) > 0 {
		select {
		case ev, ok := <-n.g.Events():
			if !ok {
				tb.Fatalf("%s: events closed while waiting for %s of %v", n.cfg.Name, kind, keys(pending))
			}
			n.events = append(n.events, ev)
			match(ev)
		case <-ctx.Done():
			tb.Fatalf("%s: no %s event for %v (%v); history: %s", n.cfg.Name, kind, keys(pending), ctx.Err(), n.history())
		}
	}
	return last
}

// lastSeen returns the member name as the latest event of kind in the
// history shows it, or a zero Member.
func (n *node) lastSeen(kind EventKind, name string) Member {
	for _, ev := range slices.Backward(n.events) {
		if ev.Kind != kind {
			continue
		}
		for _, m := range ev.Members {
			if m.Name == name {
				return m
			}
		}
	}
	return Member{}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (n *node) history() string {
	var b strings.Builder
	for _, ev := range n.events {
		for _, m := range ev.Members {
			fmt.Fprintf(&b, "%s(%s) ", ev.Kind, m.Name)
		}
	}
	return b.String()
}

// names returns the names of ms.
func names(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// cluster starts len(names) Fast nodes sharing key, joins each to the first
// and waits until every node has seen every other join. It returns the nodes
// and how long each join took to reach all the others.
func cluster(tb testing.TB, key []byte, nodeNames ...string) ([]*node, []time.Duration) {
	tb.Helper()
	nodes := make([]*node, len(nodeNames))
	for i, name := range nodeNames {
		nodes[i] = start(tb, testConfig(tb, name, key))
	}
	var took []time.Duration
	for i, n := range nodes[1:] {
		marks := make([]int, i+1)
		for j := range marks {
			marks[j] = nodes[j].mark()
		}
		t0 := time.Now()
		joined, err := n.g.Join(tb.Context(), []string{nodes[0].addr()})
		if err != nil || joined != 1 {
			tb.Fatalf("%s joins %s: %d, %v", n.cfg.Name, nodes[0].cfg.Name, joined, err)
		}
		var last time.Time
		for j := range marks {
			if at := nodes[j].await(tb, marks[j], EventJoin, n.cfg.Name); at.After(last) {
				last = at
			}
		}
		took = append(took, last.Sub(t0))
	}
	for _, n := range nodes {
		n.await(tb, 0, EventJoin, nodeNames...)
	}
	return nodes, took
}
