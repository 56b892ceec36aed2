package control

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// fakeLighthouse is one control node's record of host updates: when each
// address was last heard (absent: never), and how long it has listened.
type fakeLighthouse struct {
	now       *time.Time
	at        map[netip.Addr]time.Time
	listening time.Duration
	after     time.Duration

	mu     sync.Mutex // the raft test's handlers and loops read it at once
	silent int        // Silent calls
}

// set records a host update from a, guarded (the raft test).
func (f *fakeLighthouse) set(a netip.Addr, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at[a] = at
}

// calls is how many times Silent was asked.
func (f *fakeLighthouse) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.silent
}

func (f *fakeLighthouse) Silent() []netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.silent++
	var out []netip.Addr
	for a, at := range f.at {
		if f.now.Sub(at) >= f.after {
			out = append(out, a)
		}
	}
	return out
}

func (f *fakeLighthouse) Heard(a netip.Addr) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.at[a]
	return f.now.Sub(at), ok
}

func (f *fakeLighthouse) Listening() time.Duration { return f.listening }
func (f *fakeLighthouse) After() time.Duration     { return f.after }

// fakeRecords is raft's records, with a count of the lookups.
type fakeRecords struct {
	nodes map[string]state.Node
}

func (f *fakeRecords) Node(id string) (state.Node, bool) {
	n, ok := f.nodes[id]
	return n, ok
}

func (f *fakeRecords) NodeByOverlayIP(a netip.Addr) (state.Node, bool) {
	for _, n := range f.nodes { // a fake: the FSM's is a map lookup
		if n.OverlayIP == a {
			return n, true
		}
	}
	return state.Node{}, false
}

func (f *fakeRecords) Unheard() []string {
	var out []string
	for id, n := range f.nodes {
		if n.State == state.NodeActive && !n.Unheard.IsZero() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// verdictWorld is a leader and two other control nodes (c2, c3), each
// with its lighthouse, and the members on record.
type verdictWorld struct {
	now    time.Time
	leader *fakeLighthouse
	peers  map[string]*fakeLighthouse // by control node id
	down   map[string]bool            // control nodes that do not answer
	recs   *fakeRecords
	writes []state.SetUnheard
	mu     sync.Mutex // the asks run at once
	asked  int        // questions asked
}

const verdictAfter = 6 * time.Second // three 2 s intervals (timers: lan)

func newVerdictWorld(t *testing.T, members int) (*verdictWorld, *verdict) {
	t.Helper()
	w := &verdictWorld{now: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), down: map[string]bool{},
		recs: &fakeRecords{nodes: map[string]state.Node{}}}
	lh := func() *fakeLighthouse {
		return &fakeLighthouse{now: &w.now, at: map[netip.Addr]time.Time{}, listening: time.Hour, after: verdictAfter}
	}
	w.leader, w.peers = lh(), map[string]*fakeLighthouse{"c2": lh(), "c3": lh()}
	for i := range members {
		n := memberNode(i)
		w.recs.nodes[n.ID] = n
		w.leader.at[n.OverlayIP] = w.now
		for _, p := range w.peers {
			p.at[n.OverlayIP] = w.now
		}
	}
	v := &verdict{self: "c1", lh: w.leader, recs: w.recs, now: func() time.Time { return w.now }, began: w.now.Add(-time.Hour),
		others: func() []state.Node {
			return []state.Node{{ID: "c2", Role: pki.RoleControl, State: state.NodeActive}, {ID: "c3", Role: pki.RoleControl, State: state.NodeActive}}
		},
		ask: func(_ context.Context, n state.Node, addrs []netip.Addr) (HeardAnswer, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.asked++
			if w.down[n.ID] {
				return HeardAnswer{}, errors.New("no answer")
			}
			return heardAnswer(w.peers[n.ID], addrs), nil
		},
		write: func(_ context.Context, c state.SetUnheard) error {
			w.writes = append(w.writes, c)
			for _, ch := range c.Changes { // as the FSM applies it
				n := w.recs.nodes[ch.NodeID]
				n.Unheard = ch.At
				w.recs.nodes[ch.NodeID] = n
			}
			return nil
		}}
	return w, v
}

func memberNode(i int) state.Node {
	return state.Node{ID: "n-w" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)),
		Role: pki.RoleWorker, State: state.NodeActive, OverlayIP: netip.AddrFrom4([4]byte{10, 42, byte(1 + i/250), byte(1 + i%250)})}
}

// silence makes member i stop reporting to the lighthouses named ("c1"
// is the leader) 10 s before now.
func (w *verdictWorld) silence(i int, on ...string) {
	a := memberNode(i).OverlayIP
	for _, c := range on {
		if c == "c1" {
			w.leader.at[a] = w.now.Add(-10 * time.Second)
		} else {
			w.peers[c].at[a] = w.now.Add(-10 * time.Second)
		}
	}
}

// TestVerdict: silent on the leader only → not unheard; silent on every
// control node → unheard in one write; heard again on one → cleared; a
// control node that does not answer leaves a majority (2 of 3) to
// decide, two that do not leave none → no verdict; a young term sets
// nothing; a control node is never judged.
func TestVerdict(t *testing.T) {
	ctx := context.Background()
	w, v := newVerdictWorld(t, 5)
	id := func(i int) string { return memberNode(i).ID }

	w.silence(0, "c1")
	if got := v.tick(ctx); len(got) != 0 || len(w.writes) != 0 {
		t.Fatalf("silent on the leader only: wrote %v", got)
	}
	w.silence(0, "c2", "c3")
	w.silence(1, "c1", "c2", "c3")
	got := v.tick(ctx)
	if len(w.writes) != 1 || len(got) != 2 || got[0].At.IsZero() || got[1].At.IsZero() {
		t.Fatalf("silent everywhere: writes %d, changes %v; want one write setting two", len(w.writes), got)
	}
	if n := w.recs.nodes[id(0)]; !n.Unheard.Equal(w.now.Truncate(time.Second)) {
		t.Errorf("w0 unheard %v, want %v", n.Unheard, w.now)
	}
	// Nothing new: nothing written.
	if got := v.tick(ctx); len(got) != 0 {
		t.Errorf("a tick with nothing new wrote %v", got)
	}
	// w0 heard again by c3 alone: cleared.
	w.peers["c3"].at[memberNode(0).OverlayIP] = w.now
	if got := v.tick(ctx); len(got) != 1 || got[0].NodeID != id(0) || !got[0].At.IsZero() {
		t.Fatalf("heard again on c3: changes %v, want w0 cleared", got)
	}
	// w1 heard again by the leader: cleared without asking (w0 back on
	// the leader too: a member silent on the leader alone is asked about
	// every tick).
	w.leader.at[memberNode(0).OverlayIP] = w.now
	w.leader.at[memberNode(1).OverlayIP], w.asked = w.now, 0
	if got := v.tick(ctx); len(got) != 1 || got[0].NodeID != id(1) || w.asked != 0 {
		t.Fatalf("heard again on the leader: changes %v, asked %d; want w1 cleared, none asked", got, w.asked)
	}

	// c3 does not answer: the leader and c2 are a majority of 3.
	w.down["c3"] = true
	w.silence(2, "c1", "c2")
	if got := v.tick(ctx); len(got) != 1 || got[0].NodeID != id(2) || got[0].At.IsZero() {
		t.Fatalf("silent on 2 of 3 answering: changes %v, want w2 set", got)
	}
	// Neither c2 nor c3 answers: no quorum, no verdict.
	w.down["c2"] = true
	w.silence(3, "c1", "c2", "c3")
	if got := v.tick(ctx); len(got) != 0 {
		t.Fatalf("only the leader answered: changes %v, want none", got)
	}
	w.down = map[string]bool{}

	// A young term sets nothing, but clears.
	v.began = w.now.Add(-time.Second)
	w.peers["c2"].at[memberNode(2).OverlayIP] = w.now
	got = v.tick(ctx)
	if len(got) != 1 || got[0].NodeID != id(2) || !got[0].At.IsZero() {
		t.Fatalf("young term: changes %v, want w2 cleared and w3 not set", got)
	}
	v.began = w.now.Add(-verdictAfter)
	if got := v.tick(ctx); len(got) != 1 || got[0].NodeID != id(3) {
		t.Fatalf("three intervals into the term: changes %v, want w3 set", got)
	}

	// A control node silent everywhere is gossip's to judge; a stock
	// Nebula member (10 s between its updates) is not judged either.
	for _, role := range []pki.Role{pki.RoleControl, pki.RoleNebula} {
		c := memberNode(4)
		c.Role = role
		w.recs.nodes[c.ID] = c
		w.silence(4, "c1", "c2", "c3")
		if got := v.tick(ctx); len(got) != 0 {
			t.Errorf("a silent %s node: changes %v, want none", role, got)
		}
	}
}

// TestVerdictYoungLighthouse: a control node that never heard a member
// and has listened for less than three intervals says nothing of it
// (it just started): with the leader and it alone, no verdict.
func TestVerdictYoungLighthouse(t *testing.T) {
	w, v := newVerdictWorld(t, 1)
	w.down["c3"] = true
	delete(w.peers["c2"].at, memberNode(0).OverlayIP)
	w.peers["c2"].listening = time.Second
	w.silence(0, "c1")
	if got := v.tick(context.Background()); len(got) != 0 {
		t.Fatalf("young c2 never heard w0: changes %v, want none", got)
	}
	w.peers["c2"].listening = time.Minute
	if got := v.tick(context.Background()); len(got) != 1 {
		t.Fatalf("c2 listening a minute, never heard w0: changes %v, want w0 set", got)
	}
}

// TestVerdictCostsTheSilent: with 10,000 members, a tick reads the
// records of the silent and the unheard only, and asks each other
// control node once (issue 54: no timer loop touches every peer).
func TestVerdictCostsTheSilent(t *testing.T) {
	w, v := newVerdictWorld(t, 10000)
	w.silence(7, "c1", "c2", "c3")
	w.silence(8, "c1")
	if got := v.tick(context.Background()); len(got) != 1 {
		t.Fatalf("changes %v, want w7 set", got)
	}
	w.asked = 0
	if got := v.tick(context.Background()); len(got) != 0 || v.looked != 2 || w.asked != 2 {
		t.Fatalf("a tick with one unheard and one silent: changes %v, %d records read, %d questions; want none, 2, 2", got, v.looked, w.asked)
	}
}
