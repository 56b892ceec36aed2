package control

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/watch"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// watchStream is one open GET /v1/watch, its lines decoded as they come.
type watchStream struct {
	lines chan watch.Change
	ended chan error // the read's end (nil on a clean EOF)
	stop  context.CancelFunc
}

func openWatch(t *testing.T, cl *Client, addr string, since uint64) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body, err := cl.Stream(ctx, addr, PathWatch+"?index="+strconv.FormatUint(since, 10))
	if err != nil {
		cancel()
		t.Fatalf("watch from %d: %v", since, err)
	}
	w := &watchStream{lines: make(chan watch.Change, 100), ended: make(chan error, 1), stop: cancel}
	go func() {
		defer body.Close()
		w.ended <- watch.ReadStream(body, func(ch watch.Change, _ int) error {
			w.lines <- ch
			return nil
		})
	}()
	t.Cleanup(cancel)
	return w
}

// next is the stream's next line that carries something.
func (w *watchStream) next(t *testing.T) watch.Change {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ch := <-w.lines:
			if !ch.Empty() {
				return ch
			}
		case err := <-w.ended:
			t.Fatalf("the watch ended: %v", err)
		case <-deadline:
			t.Fatal("no change on the watch within 10s")
		}
	}
}

// until applies the stream's lines to c until cond holds.
func (w *watchStream) until(t *testing.T, c *watch.Copy, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		c.Apply(w.next(t))
	}
	_ = what
}

func nodeState(c *watch.Copy, id string) string {
	raw, ok := c.Item(SectionNodes, id)
	if !ok {
		return ""
	}
	r, err := WatchedRecord(id, raw)
	if err != nil {
		return "undecodable"
	}
	return r.State
}

// tableSettled waits for m's watch table to hold its FSM's state.
func tableSettled(t testing.TB, m *member) {
	t.Helper()
	waitFor(t, 5*time.Second, m.name+"'s watch table at its FSM's index", func() bool {
		i, _ := m.p.WatchTable().Index()
		return i >= m.p.Raft().FSM().Index()
	})
}

// TestWatchCatchUp is issue 32's "a worker that missed changes while
// partitioned catches up from its index, and one that fell past
// compaction takes a full list": a worker's stream cut off (its index
// kept) while a node is removed and another admitted gets, on its next
// stream, only those two records and the new revocations; one cut off
// while more ephemeral nodes were forgotten than the table keeps
// tombstones for gets the whole table, and ends up holding exactly what a
// new worker holds.
func TestWatchCatchUp(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, tombs: 2}
	origin := c.bootstrap(t, nil)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	w2 := c.admitWorker(t, origin, "w2", false)
	w3 := c.admitWorker(t, origin, "w3", false)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)

	var held watch.Copy
	s := openWatch(t, cl, origin.addr, 0)
	first := s.next(t)
	if !first.Full || len(first.Put[SectionNodes]) != 4 || len(first.Put[SectionKeys]) != 1 || len(first.Put[SectionCA]) != 1 {
		t.Fatalf("first contact: full %v, %d nodes, keys %d, CA %d; want the whole table (4 nodes, keys, CA)",
			first.Full, len(first.Put[SectionNodes]), len(first.Put[SectionKeys]), len(first.Put[SectionCA]))
	}
	held.Apply(first)
	s.stop() // cut off, index kept
	cutAt := held.Index()

	if _, err := origin.p.remove(within(t, 10*time.Second), "w2", "test"); err != nil {
		t.Fatal(err)
	}
	w4 := c.admitWorker(t, origin, "w4", false)
	s = openWatch(t, cl, origin.addr, cutAt)
	d := s.next(t)
	if d.Full {
		t.Fatal("a worker back from a cut got the whole table; want what changed since its index")
	}
	if got := slices.Sorted(maps.Keys(d.Put[SectionNodes])); !slices.Equal(got, []string{w2.ID, w4.ID}) {
		w3was, _ := held.Item(SectionNodes, w3.ID)
		t.Fatalf("records in the catch-up: %v, want only w2 (removed) and w4 (admitted); w3 was %s now %s", got, w3was, d.Put[SectionNodes][w3.ID])
	}
	// The keyring comes along only if it changed (a removal rotates it
	// when the departed node is owed one); the CA bundles did not change.
	heldKeys, _ := held.Item(SectionKeys, keyKeys)
	cl0, _ := origin.p.Raft().FSM().Cluster()
	rotated := string(heldKeys) != string(mustJSON(GossipKeys{Keys: cl0.GossipKeys, Rotated: cl0.GossipKeysRotated}))
	if len(d.Put[SectionRevoked]) == 0 || (len(d.Put[SectionKeys]) == 1) != rotated || len(d.Put[SectionCA]) != 0 {
		t.Fatalf("catch-up: %d revocations, keys %d (rotated since: %v), CA %d; want w2's revocations, and the keys only if rotated",
			len(d.Put[SectionRevoked]), len(d.Put[SectionKeys]), rotated, len(d.Put[SectionCA]))
	}
	held.Apply(d)
	s.until(t, &held, "w4 active", func() bool { return nodeState(&held, w4.ID) == string(state.NodeActive) })
	if nodeState(&held, w2.ID) != string(state.NodeRemoved) {
		t.Fatalf("w2 is %q in the caught-up copy", nodeState(&held, w2.ID))
	}
	s.stop()
	cutAt = held.Index()

	// Past compaction: three ephemeral nodes forgotten, with two
	// tombstones kept.
	for _, name := range []string{"e1", "e2", "e3"} {
		n := c.admitWorker(t, origin, name, true)
		tableSettled(t, origin) // the table holds the record it then deletes
		ctx := within(t, 5*time.Second)
		if err := origin.p.Write(ctx, &state.SetNodeState{NodeID: n.ID, State: state.NodeRemoved, At: time.Now(), Actor: "test"}); err != nil {
			t.Fatal(err)
		}
		if err := origin.p.Write(ctx, &state.ForgetNode{NodeID: n.ID, At: time.Now(), Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	tableSettled(t, origin)
	if f := origin.p.WatchTable().Floor(); f <= cutAt {
		t.Fatalf("floor %d not past the worker's index %d: the tombstones were kept", f, cutAt)
	}
	s = openWatch(t, cl, origin.addr, cutAt)
	full := s.next(t)
	if !full.Full {
		t.Fatal("a worker behind the table's floor got a delta; want the whole table")
	}
	held.Apply(full)
	fresh := openWatch(t, cl, origin.addr, 0)
	var now watch.Copy
	now.Apply(fresh.next(t))
	if now.Index() != held.Index() {
		t.Skipf("raft moved between the two streams (%d, %d)", held.Index(), now.Index())
	}
	for _, sec := range []string{SectionNodes, SectionRevoked, SectionKeys, SectionCA} {
		if !maps.EqualFunc(held.Items(sec), now.Items(sec), func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Fatalf("section %s: the caught-up copy differs from a new worker's", sec)
		}
	}
	if held.Len(SectionNodes) != 5 || nodeState(&held, w3.ID) != string(state.NodeActive) {
		t.Fatalf("after the full table: %d records (want origin, w1, w2 removed, w3, w4), w3 %q", held.Len(SectionNodes), nodeState(&held, w3.ID))
	}
}

// TestWatchEndsForADepartedMember: a worker's stream ends when raft
// records it removed, and no line after its removal reaches it: the
// gossip keyring rotated after a removal never travels to the node it
// shuts out. A removed node cannot open another.
func TestWatchEndsForADepartedMember(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	nodeID := c.admitLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	s := openWatch(t, cl, origin.addr, 0)
	s.next(t)
	if _, err := origin.p.remove(within(t, 10*time.Second), "w1", "test"); err != nil {
		t.Fatal(err)
	}
	removedAt := origin.p.Raft().FSM().Index()
	deadline := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case ch := <-s.lines:
			if !ch.Empty() && ch.Index >= removedAt {
				if nodeState(new(watch.Copy), nodeID) == "" && len(ch.Put[SectionKeys]) > 0 {
					t.Fatal("the removed worker was sent the gossip keyring")
				}
				t.Fatalf("a line at index %d reached the worker removed at %d", ch.Index, removedAt)
			}
		case <-s.ended:
			ended = true
		case <-deadline:
			t.Fatal("the removed worker's stream is still open 10s after its removal")
		}
	}
	_, err = cl.Stream(within(t, 5*time.Second), origin.addr, PathWatch+"?index=0")
	if codes.Of(err) != codes.NotMember {
		t.Fatalf("a removed worker opening a stream: %v, want %s", err, codes.NotMember)
	}
}

// TestWatchItems: what a change carries of a record and a revocation.
// A departed or joining node's record is its state alone; a worker's has
// no role and no TLS leaf, a control node's has both; a removed node's
// TLS leaf fingerprints are counted (0) and its Nebula fingerprint round
// trips through the shorter base64 form.
func TestWatchItems(t *testing.T) {
	w := state.Node{ID: "a", Name: "w1", Role: pki.RoleWorker, State: state.NodeActive, Underlay: "192.0.2.1",
		TLSFingerprint: "tls-w1", NebulaPort: 4242, SerfAddr: ":7946"}
	if got := string(mustJSON(recordOf(w))); got != `{"name":"w1","state":"active","ul":"192.0.2.1","np":4242,"sa":":7946"}` {
		t.Fatalf("active worker: %s", got)
	}
	if r, _ := WatchedRecord("a", mustJSON(recordOf(w))); r.RoleOf() != pki.RoleWorker || r.Name != "w1" || r.ID != "a" {
		t.Fatalf("decoded worker: %+v", r)
	}
	// The control nodes' liveness verdict (verdict.go) reaches a worker's
	// copy, to the second; heard again, the record is as before.
	unheard := w
	unheard.Unheard = time.Date(2026, 12, 7, 21, 0, 5, 0, time.UTC)
	if r, _ := WatchedRecord("a", mustJSON(recordOf(unheard))); !r.Unheard.Equal(unheard.Unheard) || recordOf(unheard).same(recordOf(w)) {
		t.Fatalf("decoded unheard worker: unheard %v, want %v (and a change)", r.Unheard, unheard.Unheard)
	}
	ctl := w
	ctl.Role, ctl.TLSPublicKey = pki.RoleControl, []byte{1}
	if r, _ := WatchedRecord("a", mustJSON(recordOf(ctl))); r.RoleOf() != pki.RoleControl || r.TLSFingerprint != "tls-w1" || len(r.TLSPublicKey) != 1 {
		t.Fatalf("decoded control node: %+v", r)
	}
	for _, st := range []state.NodeState{state.NodeRemoved, state.NodeLeft, state.NodeFailed, state.NodeJoining} {
		gone := w
		gone.State = st
		if got := string(mustJSON(recordOf(gone))); got != `{"state":"`+string(st)+`"}` {
			t.Fatalf("%s: %s", st, got)
		}
	}
	nebula := "155d482139c3be31d8e237a27bb6708daf5f98cc1f8a9cde5764b07afcd442b2"
	n := state.Node{ID: "a", TLSFingerprint: "t1", PrevTLSFingerprint: "t0", Retired: []string{"t-1"}, NebulaFingerprint: nebula}
	for fp, want := range map[string]string{"t1": "", "t0": "", "t-1": "", nebula: nebula, "other": "other"} {
		raw := revokedItem(state.Revocation{NodeID: "a", Fingerprint: fp}, n, true)
		got, err := WatchedRevocation(raw)
		if err != nil || got != want || (fp == nebula && len(raw) != 45) {
			t.Fatalf("revocation %s: carried %s, decoded %q (%v); want %q", fp, raw, got, err, want)
		}
	}
	// A node no longer on record (forgotten): every fingerprint carried.
	if got, _ := WatchedRevocation(revokedItem(state.Revocation{NodeID: "gone", Fingerprint: "t1"}, state.Node{}, false)); got != "t1" {
		t.Fatalf("a forgotten node's revocation: %q", got)
	}
}

// TestLeaderWatch: the channel closes once no leader has been seen for
// the bound, not before, and a leader seen again gives a new, open one.
func TestLeaderWatch(t *testing.T) {
	var leader atomic.Value
	leader.Store("c1")
	l := newLeaderWatch(100*time.Millisecond, 5*time.Millisecond)
	stop := make(chan struct{})
	defer close(stop)
	go l.run(stop, func() string { return leader.Load().(string) })
	first := l.gone()
	time.Sleep(50 * time.Millisecond) // with a leader, nothing may close
	if isClosed(first) {
		t.Fatal("closed while a leader is known")
	}
	lostAt := time.Now()
	leader.Store("")
	select {
	case <-first:
		if took := time.Since(lostAt); took < 100*time.Millisecond {
			t.Fatalf("closed %s after the leader went, before the bound", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not closed 5s after the leader went")
	}
	leader.Store("c2")
	waitFor(t, 5*time.Second, "an open channel once a leader is back", func() bool { return !isClosed(l.gone()) })
}

// TestWatchEndsOnStop (issue 54 item 4): EndStreams, which a stopping
// runtime calls before it shuts its control server down, ends an open
// stream at once, where the stream used to hold the server's shutdown
// for its whole 3 s bound.
func TestWatchEndsOnStop(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	s := openWatch(t, cl, origin.addr, 0)
	s.next(t)
	start := time.Now()
	origin.p.EndStreams()
	for {
		select {
		case <-s.lines:
			continue
		case <-s.ended:
			t.Logf("the stream ended %s after EndStreams", time.Since(start).Round(time.Millisecond))
			return
		case <-time.After(2 * time.Second):
			t.Fatal("the stream is still open 2 s after EndStreams")
		}
	}
}

// TestWatchRecordSameEveryField: two records that differ in any one field
// are not the same, so a change of that field alone (a worker's NAT by
// its facts) is encoded again and sent; a new field fails here until
// same compares it.
func TestWatchRecordSameEveryField(t *testing.T) {
	var base watchRecord
	typ := reflect.TypeFor[watchRecord]()
	for i := range typ.NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]byte{1}))
		default:
			t.Fatalf("field %s: kind %s not handled here", typ.Field(i).Name, f.Kind())
		}
		if base.same(other) {
			t.Errorf("records differing in %s alone are the same", typ.Field(i).Name)
		}
	}
}
