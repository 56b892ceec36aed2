package gossip

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshd/meshd/codes"
)

func TestClusterForms(t *testing.T) {
	nodes, took := cluster(t, newKey(t), "a", "b", "c")
	t.Logf("join propagation (Join call to the last peer's join event): %v", took)

	for _, n := range nodes {
		ms := n.g.Members()
		if got := names(ms); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("%s: members %v, want [a b c]", n.cfg.Name, got)
		}
		for i, m := range ms {
			if m.Status != StatusAlive {
				t.Errorf("%s sees %s %s, want alive", n.cfg.Name, m.Name, m.Status)
			}
			if !maps.Equal(m.Tags, nodes[i].cfg.Tags) {
				t.Errorf("%s sees %s tags %v, want %v", n.cfg.Name, m.Name, m.Tags, nodes[i].cfg.Tags)
			}
			if m.Addr.String() != nodes[i].addr() {
				t.Errorf("%s sees %s at %v, want %s", n.cfg.Name, m.Name, m.Addr, nodes[i].addr())
			}
		}
		if lm := n.g.LocalMember(); lm.Name != n.cfg.Name || lm.Status != StatusAlive {
			t.Errorf("LocalMember = %+v", lm)
		}
	}
}

func TestTagUpdate(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b", "c")
	marks := []int{nodes[1].mark(), nodes[2].mark()}
	tags := map[string]string{"id": "id-a", "role": "control", "overlay_ip": "10.42.0.1", "nebula_port": "4242"}
	if err := nodes[0].g.SetTags(tags); err != nil {
		t.Fatal(err)
	}
	tags["role"] = "mutated after SetTags" // must not reach gossip
	for i, n := range nodes[1:] {
		n.await(t, marks[i], EventUpdate, "a")
		if got := n.lastSeen(EventUpdate, "a").Tags["role"]; got != "control" {
			t.Errorf("%s: update carries role %q, want control", n.cfg.Name, got)
		}
	}
	if got := nodes[0].g.LocalMember().Tags["overlay_ip"]; got != "10.42.0.1" {
		t.Errorf("LocalMember overlay_ip = %q", got)
	}
}

// TestUpdateTagsConcurrent: callers that each update their own tag at
// the same moment all land, on the node and at its peers.
func TestUpdateTagsConcurrent(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b")
	keys := []string{"kr", "ca", "nat", "x1", "x2", "x3"}
	for round := range 3 {
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Go(func() {
				if err := nodes[0].g.UpdateTags(map[string]string{k: fmt.Sprint(round)}); err != nil {
					t.Errorf("UpdateTags %s: %v", k, err)
				}
			})
		}
		wg.Wait()
		want := fmt.Sprint(round)
		for _, k := range keys {
			if got := nodes[0].g.LocalMember().Tags[k]; got != want {
				t.Fatalf("round %d: tag %s = %q, want %q (another update undid it)", round, k, got, want)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var m Member
		for _, mm := range nodes[1].g.Members() {
			if mm.Name == "a" {
				m = mm
			}
		}
		ok := true
		for _, k := range keys {
			ok = ok && m.Tags[k] == "2"
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b sees a's tags %v, want every one of %v at 2", m.Tags, keys)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLeave(t *testing.T) {
	// Only goroutines of this test count: the leak check below runs while
	// the test binary is otherwise idle.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	nodes, _ := cluster(t, newKey(t), "a", "b", "c")
	marks := []int{nodes[0].mark(), nodes[1].mark()}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := nodes[2].g.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Leave returned after %v", time.Since(t0))
	for i, n := range nodes[:2] {
		n.await(t, marks[i], EventLeave, "c")
	}
	if st := nodes[2].g.LocalMember().Status; st != StatusLeft {
		t.Errorf("c after Leave: %s, want left", st)
	}
	for _, m := range nodes[0].g.Members() {
		if m.Name == "c" && m.Status != StatusLeft {
			t.Errorf("a sees c %s, want left", m.Status)
		}
	}
	for _, n := range nodes {
		if err := n.g.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSnapshotRejoin(t *testing.T) {
	key := newKey(t)
	nodes, _ := cluster(t, key, "a", "b")
	cfg := testConfig(t, "c", key)
	cfg.SnapshotPath = t.TempDir() + "/serf.snapshot"
	c := start(t, cfg)
	if _, err := c.g.Join(t.Context(), []string{nodes[0].addr()}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		n.await(t, 0, EventJoin, "c")
	}

	// Stop without leaving, as a restart does, and let the others see it.
	marks := []int{nodes[0].mark(), nodes[1].mark()}
	if err := c.g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		n.await(t, marks[i], EventFailed, "c")
	}

	// Same name, address and snapshot; no Join.
	marks = []int{nodes[0].mark(), nodes[1].mark()}
	t0 := time.Now()
	c2 := start(t, cfg)
	for i, n := range nodes {
		n.await(t, marks[i], EventJoin, "c")
	}
	t.Logf("restarted node rejoined from its snapshot after %v", time.Since(t0))
	c2.await(t, 0, EventJoin, "a", "b")
	for _, m := range nodes[0].g.Members() {
		if m.Status != StatusAlive {
			t.Errorf("a sees %s %s after the restart, want alive", m.Name, m.Status)
		}
	}
}

func TestRestartAtNewAddress(t *testing.T) {
	key := newKey(t)
	nodes, _ := cluster(t, key, "a", "b", "c")
	marks := []int{nodes[0].mark(), nodes[1].mark()}
	if err := nodes[2].g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes[:2] {
		n.await(t, marks[i], EventFailed, "c")
	}

	// The same name comes back elsewhere: DeadNodeReclaimTime lets it in.
	marks = []int{nodes[0].mark(), nodes[1].mark()}
	moved := start(t, testConfig(t, "c", key))
	if _, err := moved.g.Join(t.Context(), []string{nodes[0].addr()}); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes[:2] {
		n.await(t, marks[i], EventJoin, "c")
		for _, m := range n.g.Members() {
			if m.Name == "c" && (m.Status != StatusAlive || m.Addr.String() != moved.addr()) {
				t.Errorf("%s sees c %s at %v, want alive at %s", n.cfg.Name, m.Status, m.Addr, moved.addr())
			}
		}
	}
}

func TestWrongKeyCannotJoin(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b")
	before := nodes[0].g.KeyErrors()
	intruder := start(t, testConfig(t, "x", newKey(t)))

	n, err := intruder.g.Join(t.Context(), []string{nodes[0].addr()})
	if n != 0 || codes.Of(err) != codes.GossipKey {
		t.Fatalf("Join with the wrong key = %d, %v (code %q), want 0 and %s", n, err, codes.Of(err), codes.GossipKey)
	}
	t.Logf("wrong-key join error: %v", err)
	if got := nodes[0].g.KeyErrors(); got <= before {
		t.Errorf("a's KeyErrors = %d, want more than %d", got, before)
	}
	if intruder.g.KeyErrors() == 0 {
		t.Errorf("the intruder counted no undecryptable reply")
	}
	for _, nd := range nodes {
		if got := names(nd.g.Members()); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s: members %v after the wrong-key join, want [a b]", nd.cfg.Name, got)
		}
	}
	if got := names(intruder.g.Members()); !slices.Equal(got, []string{"x"}) {
		t.Errorf("intruder members %v, want [x]", got)
	}
}

func TestSecondaryKeyJoins(t *testing.T) {
	// Mid-rotation: a encrypts with old and can read next; b encrypts with
	// next and can read old. Each reads the other, so they gossip.
	old, next := newKey(t), newKey(t)
	a := start(t, testConfig(t, "a", old, next))
	b := start(t, testConfig(t, "b", next, old))
	if _, err := b.g.Join(t.Context(), []string{a.addr()}); err != nil {
		t.Fatalf("join with [next old] to [old next]: %v", err)
	}
	a.await(t, 0, EventJoin, "b")
	b.await(t, 0, EventJoin, "a")
	if a.g.KeyErrors() != 0 || b.g.KeyErrors() != 0 {
		t.Errorf("key errors a=%d b=%d, want none", a.g.KeyErrors(), b.g.KeyErrors())
	}
}

func TestJoinNobodyThere(t *testing.T) {
	n := start(t, testConfig(t, "lonely", newKey(t)))
	empty := takeIP(t) + ":7946" // reserved by us, so nothing listens there
	joined, err := n.g.Join(t.Context(), []string{empty})
	if joined != 0 || codes.Of(err) != codes.GossipJoin {
		t.Fatalf("Join(%s) = %d, %v (code %q), want 0 and %s", empty, joined, err, codes.Of(err), codes.GossipJoin)
	}
	if _, err := n.g.Join(t.Context(), nil); codes.Of(err) != codes.GossipJoin {
		t.Errorf("Join(nil): %v, want %s", err, codes.GossipJoin)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := n.g.Join(ctx, []string{empty}); codes.Of(err) != codes.GossipJoin {
		t.Errorf("Join(cancelled ctx): %v, want %s", err, codes.GossipJoin)
	}
}

// TestNotify: a notification from one member reaches the others as an
// EventUser carrying its name.
func TestNotify(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b", "c")
	if err := nodes[0].g.Notify("meshd-test"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		ctx, cancel := context.WithTimeout(t.Context(), awaitTimeout)
		got := false
		for !got {
			select {
			case ev := <-n.g.Events():
				n.events = append(n.events, ev)
				got = ev.Kind == EventUser && ev.Name == "meshd-test"
			case <-ctx.Done():
				cancel()
				t.Fatalf("%s: no notification; history: %s", n.cfg.Name, n.history())
			}
		}
		cancel()
	}
}
