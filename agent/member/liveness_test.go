package member

import (
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// logFacts is a node list with a change log, as a worker's fetched copies
// keep one (fetched.RecordsSince): each set is a version, and a consumer
// asking from the version before gets the records it changed.
type logFacts struct {
	clusterFacts // nil: only the methods below are called
	mu           sync.Mutex
	recs         map[string]control.NodeRecord
	ver          uint64
	changed      map[uint64][]string // the ids each version changed
	list         []control.NodeRecord
	wholes       int  // RecordsSince answers that were every record
	logOnly      bool // set keeps the log alone (the benchmark's changes): Records is stale
}

func newLogFacts(rs ...control.NodeRecord) *logFacts {
	f := &logFacts{recs: map[string]control.NodeRecord{}, changed: map[uint64][]string{}}
	f.set(rs...)
	return f
}

// set puts rs as one change.
func (f *logFacts) set(rs ...control.NodeRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ver++
	for _, r := range rs {
		f.recs[r.ID] = r
		f.changed[f.ver] = append(f.changed[f.ver], r.ID)
	}
	if f.logOnly {
		return
	}
	f.list = nil // a new slice: pair health's index sees a new list
	for _, r := range f.recs {
		f.list = append(f.list, r)
	}
	slices.SortFunc(f.list, func(a, b control.NodeRecord) int { return cmpString(a.Name, b.Name) })
}

// forget drops the record with id as one change.
func (f *logFacts) forget(id string) {
	f.mu.Lock()
	delete(f.recs, id)
	f.mu.Unlock()
	f.set()
	f.mu.Lock()
	f.changed[f.ver] = []string{id}
	f.mu.Unlock()
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (f *logFacts) RecordsSince(since uint64) fetched.RecordDelta {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := fetched.RecordDelta{Version: f.ver, Known: true}
	if since == 0 {
		f.wholes++
		d.Whole, d.All = true, slices.Clone(f.list)
		return d
	}
	for v := since + 1; v <= f.ver; v++ {
		for _, id := range f.changed[v] {
			if r, ok := f.recs[id]; ok {
				d.Put = append(d.Put, r)
			} else {
				d.Del = append(d.Del, id)
			}
		}
	}
	return d
}

func (f *logFacts) Records() ([]control.NodeRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.list, true
}

func (f *logFacts) Record(id string) (control.NodeRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[id]
	return r, ok
}

func (f *logFacts) Revocations() control.Revocations {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rev control.Revocations
	for id, r := range f.recs {
		if r.StateOf().Former() {
			rev.Gone = append(rev.Gone, id)
		}
	}
	slices.Sort(rev.Gone)
	return rev
}

func (f *logFacts) Seeds() []string { return nil }

// taggedRecord is the active record of a member startTaggedGossip
// started (or of one at ip that never gossips).
func taggedRecord(name string, role pki.Role, ip netip.Addr) control.NodeRecord {
	return control.NodeRecord{Node: apitype.Node{ID: "id-" + name, Name: name, Role: string(role), State: "active",
		OverlayIP: ip.String()}, SerfAddr: ":" + strconv.Itoa(forgedViewPort)}
}

// livenessNode is a runtime of node self over facts, reading its
// liveness from heard when not nil, else from g: what the readers need.
func livenessNode(t *testing.T, self string, ip netip.Addr, facts clusterFacts, g *gossip.Gossip, heard *recordLiveness) *Runtime {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	nd := &node{cluster: facts, log: log, now: time.Now,
		facts:    &statedir.Facts{NodeID: "id-" + self, Name: self, Overlay: netip.PrefixFrom(ip, 8)},
		ports:    config.Ports{Gossip: forgedViewPort},
		gossip:   g,
		heard:    heard,
		standing: fetched.NewStanding(time.Now, log)}
	ms := &membership{node: nd, ov: &overlay{node: nd}, keys: &keyring{node: nd},
		evidence: newEvidence(nd.gossipListens, 500*time.Millisecond, time.Now, log)}
	t.Cleanup(ms.evidence.close)
	return &Runtime{node: nd, members: ms}
}

// fakePool is a gossip pool's member list, set by the test.
type fakePool struct {
	mu      sync.Mutex
	members []gossip.Member
	bell    bell
}

func (p *fakePool) set(ms ...gossip.Member) {
	p.mu.Lock()
	p.members = ms
	p.mu.Unlock()
	p.bell.ring()
}

func (p *fakePool) Members() []gossip.Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.members)
}

func (p *fakePool) Statuses() map[netip.Addr]gossip.Status {
	out := map[netip.Addr]gossip.Status{}
	for _, m := range p.Members() {
		out[m.Addr.Addr()] = m.Status
	}
	return out
}

func (p *fakePool) Changes() <-chan struct{} { return p.bell.wait() }

func (p *fakePool) LastSeen(string) (time.Time, bool) { return time.Time{}, false }

// statusOf is name's status in ms, "" when not listed.
func statusOf(ms []gossip.Member, name string) gossip.Status {
	for _, m := range ms {
		if m.Name == name {
			return m.Status
		}
	}
	return ""
}

// TestRecordLivenessPool: on the record-fed source a worker's status is
// its record's, whatever the pool says of it, and a control node's is the
// pool's (absent while the pool does not list it), a worker this node's
// own probes suspect is suspect in Statuses alone; what a worker
// advertises beyond its record (its NAT) comes from its pool entry only
// when that entry gossips from the record's overlay address. Changes
// rings at a record's change (read when the watch stream applied it) and
// at the pool's.
func TestRecordLivenessPool(t *testing.T) {
	kIP, wIP, selfIP := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.5"), netip.MustParseAddr("10.42.0.2")
	facts := newLogFacts(taggedRecord("self", pki.RoleWorker, selfIP), taggedRecord("k", pki.RoleControl, kIP),
		taggedRecord("w", pki.RoleWorker, wIP))
	pool := &fakePool{}
	gossipAt := func(ip netip.Addr) netip.AddrPort { return netip.AddrPortFrom(ip, forgedViewPort) }
	pool.set(gossip.Member{Name: "w", Addr: gossipAt(wIP), Status: gossip.StatusFailed,
		Tags: map[string]string{tagID: "id-w", tagNAT: string(natSymmetric)}})
	l := newRecordLiveness(facts, pool, "id-self", time.Now)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after t.Context ends: run returns
	wg.Go(func() { l.run(t.Context()) })

	ms := l.Members()
	if got := statusOf(ms, "w"); got != gossip.StatusAlive {
		t.Fatalf("w is %q, want alive: its record is heard, the pool's word about a worker is not read", got)
	}
	if got := statusOf(ms, "k"); got != "" {
		t.Fatalf("k is %q, want absent: a control node's liveness is the pool's, which does not list it", got)
	}
	if got := statusOf(ms, "self"); got != gossip.StatusAlive {
		t.Fatalf("self is %q, want alive", got)
	}
	if got := peerNAT(ms, wIP); got != natSymmetric {
		t.Fatalf("w's NAT %q, want %q from its pool entry", got, natSymmetric)
	}
	pool.set(gossip.Member{Name: "w", Addr: gossipAt(wIP), Status: gossip.StatusSuspect,
		Tags: map[string]string{tagID: "id-w", tagNAT: string(natSymmetric)}})
	if got := l.Statuses()[wIP]; got != gossip.StatusSuspect {
		t.Fatalf("w's status by address %q, want suspect: this node's own probes suspect it (a hint for the relay loop)", got)
	}
	if got := statusOf(l.Members(), "w"); got != gossip.StatusAlive {
		t.Fatalf("w is %q in Members, want alive: a suspicion is no verdict", got)
	}

	wake := l.Changes()
	pool.set(gossip.Member{Name: "k", Addr: gossipAt(kIP), Status: gossip.StatusFailed, Tags: map[string]string{tagID: "id-k"}},
		gossip.Member{Name: "w", Addr: gossipAt(netip.MustParseAddr("10.42.0.9")), Status: gossip.StatusAlive,
			Tags: map[string]string{tagID: "id-w", tagNAT: string(natSymmetric)}})
	waitUntil(t, 5*time.Second, "Changes rings at the pool's change", func() bool { return closed(wake) })
	ms = l.Members()
	if got := statusOf(ms, "k"); got != gossip.StatusFailed {
		t.Fatalf("k is %q, want failed (the pool's)", got)
	}
	if got := l.Statuses()[kIP]; got != gossip.StatusFailed {
		t.Fatalf("k's status by address %q, want failed", got)
	}
	if got := peerNAT(ms, wIP); got != natUnknown {
		t.Fatalf("w's NAT %q, want unknown: its pool entry gossips from another address than its record's", got)
	}

	wake = l.Changes()
	w := taggedRecord("w", pki.RoleWorker, wIP)
	w.Unheard = time.Now().Add(-time.Minute).Truncate(time.Second)
	facts.set(w)
	l.sync() // what the watch stream's hook does (recordsChanged)
	if !closed(wake) {
		t.Fatal("Changes did not ring at the record's change")
	}
	if got := l.Statuses()[wIP]; got != gossip.StatusFailed {
		t.Fatalf("w's status by address %q, want failed: its record is unheard", got)
	}
	if at, ok := l.LastSeen("w"); !ok || !at.Equal(w.Unheard) {
		t.Fatalf("LastSeen(w) = %v, %v; want its Unheard %v", at, ok, w.Unheard)
	}
	wake = l.Changes()
	l.sync()
	if closed(wake) {
		t.Fatal("Changes rang with nothing changed")
	}
}

// TestRecordLivenessOrder: Members lists every member on record once, in
// name order, through changes that add, rename, depart and forget
// members, and a whole list read again (a consumer behind the log): the
// order kept per change is the order a sort gives.
func TestRecordLivenessOrder(t *testing.T) {
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, 1, byte(i)}) }
	rec := func(name string, i int) control.NodeRecord {
		r := taggedRecord(name, pki.RoleWorker, ip(i))
		r.ID = "id-" + strconv.Itoa(i)
		return r
	}
	facts := newLogFacts(rec("m", 1), rec("c", 2), rec("x", 3))
	l := newRecordLiveness(facts, nil, "id-1", time.Now)
	names := func() []string {
		var out []string
		for _, m := range l.Members() {
			out = append(out, m.Name+"/"+m.Tags[tagID])
		}
		return out
	}
	check := func(step string, want ...string) {
		t.Helper()
		if got := names(); !slices.Equal(got, want) {
			t.Fatalf("%s: members %v, want %v", step, got, want)
		}
	}
	check("first list", "c/id-2", "m/id-1", "x/id-3")
	facts.set(rec("a", 4), rec("z", 2)) // c renamed z
	check("added and renamed", "a/id-4", "m/id-1", "x/id-3", "z/id-2")
	facts.set(control.NodeRecord{Node: apitype.Node{ID: "id-3", State: "left"}}, rec("m", 5)) // a second m
	check("departed and a name twice", "a/id-4", "m/id-1", "m/id-5", "x/id-3", "z/id-2")
	facts.forget("id-3")
	check("forgotten", "a/id-4", "m/id-1", "m/id-5", "z/id-2")
	l.mu.Lock()
	l.ver = 0 // behind the log: the next read is the whole list
	l.mu.Unlock()
	facts.set(rec("b", 6))
	check("the whole list again", "a/id-4", "b/id-6", "m/id-1", "m/id-5", "z/id-2")
}
