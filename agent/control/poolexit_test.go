package control

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestPruneLeftPool: on a control node over real raft, a worker gossip
// shows failed that this lighthouse heard since gossip found it failed
// (it left the pool by a restart) is pruned from gossip; one last heard
// before (dead) is not, nor a control node, nor a worker gossip shows alive; without a
// lighthouse nothing is.
func TestPruneLeftPool(t *testing.T) {
	c, origin := newCluster(t)
	for _, name := range []string{"w1", "w2", "w3"} {
		id, keys, _ := c.identity(t, name, pki.RoleWorker)
		c.admitLeaf(t, origin, name, pki.RoleWorker, keys, enroll.Ports{}, id)
	}
	p := origin.p
	var pruned []string
	p.hooks.PruneFailed = func(name string) error { pruned = append(pruned, name); return nil }
	now := time.Now()
	failedAt := now.Add(-3 * time.Second) // when gossip found each failed
	p.hooks.LastSeen = func(name string) (time.Time, bool) { return failedAt, name != "w3" }
	origin.hooks.mu.Lock()
	origin.hooks.gossip = map[string]string{"c1": "failed", "w1": "failed", "w2": "failed", "w3": "alive"}
	origin.hooks.mu.Unlock()
	if got, again := p.PruneLeftPool(); got != nil || again != 0 {
		t.Fatalf("without a lighthouse: pruned %v, again in %v", got, again)
	}
	lh := &fakeLighthouse{now: &now, at: map[netip.Addr]time.Time{}, after: 6 * time.Second}
	for _, n := range p.raft.FSM().Nodes() {
		switch n.Name {
		case "w1", "w3", "c1":
			lh.at[n.OverlayIP] = now.Add(-time.Second) // heard since gossip found it failed
		case "w2":
			lh.at[n.OverlayIP] = now.Add(-5 * time.Second) // dead: its last update before gossip found it failed
		}
	}
	var l Lighthouse = lh
	p.lighthouse.Store(&l)
	if got, again := p.PruneLeftPool(); !slices.Equal(got, []string{"w1"}) || !slices.Equal(pruned, []string{"w1"}) || again != 2*time.Second {
		t.Fatalf("pruned %v (hook %v), again in %v; want w1 alone, and w2 (heard 5 s ago, before it failed) looked at again in an interval", got, pruned, again)
	}
	lh.set(wIP(t, p, "w2"), now.Add(-7*time.Second)) // unheard for three intervals: dead
	if got, again := p.PruneLeftPool(); len(got) != 1 || again != 0 {
		t.Fatalf("w2 unheard for three intervals: pruned %v, again in %v; want only w1 (the fake gossip still lists it) and no look again", got, again)
	}
}

// wIP is name's overlay address on record.
func wIP(t *testing.T, p *Plane, name string) netip.Addr {
	t.Helper()
	n, ok := p.raft.FSM().NodeByName(name)
	if !ok {
		t.Fatalf("no record of %s", name)
	}
	return n.OverlayIP
}
