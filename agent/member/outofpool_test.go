package member

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// TestInPool: every control node runs gossip whatever its config says
// (gossip_pool's default, false, included); a worker only with
// gossip_pool: true.
func TestInPool(t *testing.T) {
	for _, c := range []struct {
		pool bool
		role pki.Role
		want bool
	}{{true, pki.RoleControl, true}, {false, pki.RoleControl, true}, {true, pki.RoleWorker, true}, {false, pki.RoleWorker, false}} {
		if got := inPool(c.pool, c.role); got != c.want {
			t.Errorf("gossip_pool %v on a %s node: in the pool %v, want %v", c.pool, c.role, got, c.want)
		}
	}
}

// TestRecordLivenessNoPool: a worker out of the pool has no pool to read
// the control nodes' liveness from: a control node is alive on its
// record, left once its record departed; a worker is alive, failed since
// the control nodes' verdict once unheard, alive again when heard.
func TestRecordLivenessNoPool(t *testing.T) {
	kIP, wIP, selfIP := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.5"), netip.MustParseAddr("10.42.0.2")
	facts := newLogFacts(taggedRecord("self", pki.RoleWorker, selfIP), taggedRecord("k", pki.RoleControl, kIP),
		taggedRecord("w", pki.RoleWorker, wIP))
	l := newRecordLiveness(facts, nil, "id-self", time.Now)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() { l.run(t.Context()) })

	ms := l.Members()
	for name, want := range map[string]gossip.Status{"self": gossip.StatusAlive, "k": gossip.StatusAlive, "w": gossip.StatusAlive} {
		if got := statusOf(ms, name); got != want {
			t.Errorf("%s is %q, want %q", name, got, want)
		}
	}
	if got := l.Statuses()[kIP]; got != gossip.StatusAlive {
		t.Errorf("k's status by address %q, want alive on its record", got)
	}
	w := taggedRecord("w", pki.RoleWorker, wIP)
	w.Unheard = time.Now().Add(-time.Minute).Truncate(time.Second)
	k := taggedRecord("k", pki.RoleControl, kIP)
	k.State = "removed"
	facts.set(w, k)
	l.sync()
	ms = l.Members()
	if got := statusOf(ms, "w"); got != gossip.StatusFailed {
		t.Errorf("w unheard is %q, want failed", got)
	}
	if at, ok := l.LastSeen("w"); !ok || !at.Equal(w.Unheard) {
		t.Errorf("LastSeen(w) = %v, %v; want its Unheard %v", at, ok, w.Unheard)
	}
	if got := statusOf(ms, "k"); got != gossip.StatusLeft {
		t.Errorf("k removed is %q, want left", got)
	}
	w.Unheard = time.Time{}
	facts.set(w)
	l.sync()
	if got := l.Statuses()[wIP]; got != gossip.StatusAlive {
		t.Errorf("w heard again: %q, want alive", got)
	}
}

// TestNoGossipRuntime: a worker's runtime without gossip (out of the
// pool) reads its liveness from its node list and takes the paths that
// touched gossip without it: no events, no loops on the pool, no gossip
// status, no NAT tag, pair health probing the control nodes alone, a new
// keyring kept in its facts.
func TestNoGossipRuntime(t *testing.T) {
	kIP, selfIP := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.2")
	facts := newLogFacts(taggedRecord("self", pki.RoleWorker, selfIP), taggedRecord("k", pki.RoleControl, kIP))
	rt := livenessNode(t, "self", selfIP, facts, nil, nil)
	rt.keys = rt.members.keys
	rt.keys.report = make(chan struct{}, 1)
	rt.stateDir = t.TempDir()
	if got := rt.livenessOf(LivenessGossip); got != LivenessRecords {
		t.Fatalf("liveness out of the pool: %v, want LivenessRecords", got)
	}
	rt.heard = newRecordLiveness(facts, nil, rt.facts.NodeID, time.Now)
	if rt.gossipEvents() != nil {
		t.Error("gossip events without gossip: want none (a nil channel)")
	}
	rt.spawnPoolLoops() // spawns nothing: Spawn would need loopCtx
	if s := rt.members.gossipStatus(); s != nil {
		t.Errorf("gossip status without gossip: %+v, want none", s)
	}
	rt.reportNAT(natSymmetric)
	if got := statusOf(rt.peers().Members(), "k"); got != gossip.StatusAlive {
		t.Errorf("the control node k reads %q, want alive on its record", got)
	}
	if rt.pairProbes(taggedRecord("w", pki.RoleWorker, netip.MustParseAddr("10.42.0.5"))) || !rt.pairProbes(taggedRecord("k", pki.RoleControl, kIP)) {
		t.Error("pair health out of the pool: want the control nodes probed, no worker (a tunnel to every worker)")
	}
	keys := [][]byte{make([]byte, 32)}
	rt.keys.applyKeys(keys, time.Now())
	if len(rt.facts.GossipKeys) != 1 {
		t.Errorf("a new keyring out of the pool was not kept in the facts: %d keys", len(rt.facts.GossipKeys))
	}
}
