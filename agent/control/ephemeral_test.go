package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// admitWorker records name as an active worker, ephemeral or not, as an
// admission of issue 31 records one (the Admit command with
// Node.Ephemeral; the enroll server's ledger does not set it itself
// yet), with its certificates recorded and its join confirmed. Its TLS
// key signs what it states (c.attest), so its acknowledgements count.
func (c *testCluster) admitWorker(t *testing.T, via *member, name string, ephemeral bool) state.Node {
	t.Helper()
	return c.admitWorkerID(t, via, "id-"+name, name, ephemeral)
}

// admitWorkerID is admitWorker with the node id id.
func (c *testCluster) admitWorkerID(t *testing.T, via *member, id, name string, ephemeral bool) state.Node {
	t.Helper()
	ctx := within(t, 10*time.Second)
	h := mint(t, via, name, pki.RoleWorker)
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	c.tlsKeys.Store(name, keys.TLSKeyPEM)
	pub, err := pki.CSRPublicKey(keys.CSR)
	if err != nil {
		t.Fatal(err)
	}
	at := via.p.now()
	if err := via.p.Write(ctx, &state.Admit{Admission: enroll.Admission{Token: h, NodeID: id, Name: name, Role: pki.RoleWorker,
		Underlay: "127.0.0.1", SourceAddr: "127.0.0.1", TLSPublicKey: pub, NebulaPub: keys.NebulaPublicPEM, Version: "test", At: at},
		Node: state.Node{Ephemeral: ephemeral}, Actor: "test"}); err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	if err := via.p.Write(ctx, &state.RecordCerts{NodeID: id, TLSCert: []byte("tls-" + name), TLSFingerprint: "tls-fp-" + name,
		TLSExpires: at.Add(30 * 24 * time.Hour), NebulaCert: []byte("nebula-" + name), NebulaFingerprint: "nebula-fp-" + name,
		NebulaExpires: at.Add(365 * 24 * time.Hour), At: at, Actor: "test", Joining: true}); err != nil {
		t.Fatalf("certify %s: %v", name, err)
	}
	c.confirm(t, id)
	waitState(t, via, id, state.NodeActive)
	n, _ := via.p.Raft().FSM().Node(id)
	if n.Ephemeral != ephemeral {
		t.Fatalf("%s recorded ephemeral %v, want %v", name, n.Ephemeral, ephemeral)
	}
	return n
}

// setGossip replaces what m's gossip shows: the view by name, and when
// it learned each member that is down failed or left (LastSeen).
func setGossip(m *member, view map[string]string, lastSeen map[string]time.Time) {
	m.hooks.mu.Lock()
	defer m.hooks.mu.Unlock()
	m.hooks.gossip, m.hooks.lastSeen = view, lastSeen
}

// setSilent has nodes not answer m's direct probes of their overlay
// addresses (Hooks.Reach), as nodes that are down do not; every other
// node answers.
func setSilent(m *member, nodes ...state.Node) {
	m.hooks.mu.Lock()
	defer m.hooks.mu.Unlock()
	m.hooks.silent = map[netip.Addr]bool{}
	for _, n := range nodes {
		m.hooks.silent[n.OverlayIP] = true
	}
}

// answerRevocations has every active member answer m's revocation
// queries, each signed with its own key, as a member that blocks the
// list does; asked counts the queries.
func answerRevocations(t *testing.T, c *testCluster, m *member, asked *atomic.Int32) {
	m.hooks.mu.Lock()
	defer m.hooks.mu.Unlock()
	m.hooks.ask = func(_ context.Context, name string, payload []byte, _ time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error) {
		var q RevocationQuery
		if name != RevocationQueryName || json.Unmarshal(payload, &q) != nil {
			return nil, errNoGossip // the key rotation's keyring query: the tags report
		}
		asked.Add(1)
		answers := map[string][]byte{}
		for _, n := range m.p.Raft().FSM().Nodes() {
			if n.State == state.NodeActive {
				answers[n.Name] = ack(t, c, n.Name, n.Name, q.Version, q.Nonce)
			}
		}
		done(answers)
		return answers, nil
	}
}

// awaitSweeps waits until m's ephemeral sweep has run n more times: with
// n of 2, at least one whole sweep began after the call.
func awaitSweeps(t *testing.T, m *member, n uint64) {
	t.Helper()
	from := m.p.reaper.sweeps.Load()
	waitFor(t, 10*time.Second, fmt.Sprintf("%s sweeps %d more times", m.name, n), func() bool {
		return m.p.reaper.sweeps.Load() >= from+n
	})
}

// leadOn has other hand raft leadership off until want leads: on a
// loaded machine other may win the election a hand-off starts.
func leadOn(t *testing.T, want, other *member) {
	t.Helper()
	waitFor(t, 20*time.Second, want.name+" leads", func() bool {
		if other.p.Raft().IsLeader() {
			_ = other.p.Raft().HandOff()
		}
		return want.p.Raft().IsLeader()
	})
}

// forgotten reports whether m has no record of node id.
func forgotten(m *member, id string) bool {
	_, ok := m.p.Raft().FSM().Node(id)
	return !ok
}

// auditOf lists the codes of m's audit events about subject, with the
// actor of each, oldest first.
func auditOf(m *member, subject string) []string {
	var out []string
	for _, e := range m.p.Raft().FSM().Audit() {
		if e.Subject == subject {
			out = append(out, string(e.Code)+" "+e.Actor)
		}
	}
	return out
}

// TestReapEphemeral: on the leader, an ephemeral worker that gossip has
// seen failed for the window (by the leader's own clock) is removed as
// `meshctl remove` removes it (recorded removed by this node, its
// certificates revoked, every active member asked to acknowledge, the
// round recorded), then forgotten (record, overlay IP and name free, its
// revocations kept); one that left (`meshctl leave`) likewise. One down
// for less than the window is not, until the window has passed; one
// that came back within the window (a restart) is not; a node that is
// not ephemeral never is, however long it is down; nor is this node, the
// CA holder, flagged ephemeral (a control node is never removed on a
// timer).
func TestReapEphemeral(t *testing.T) {
	const window = 400 * time.Millisecond
	clk := &tokClock{now: time.Now()}
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, ephemeral: window,
		nows: map[string]func() time.Time{"origin": clk.Now}}
	origin := c.bootstrap(t, func(_ *testCluster, n *state.Node) { n.Ephemeral = true })
	var asked atomic.Int32
	answerRevocations(t, c, origin, &asked)
	killed := c.admitWorker(t, origin, "killed", true)
	brief := c.admitWorker(t, origin, "brief", true)
	back := c.admitWorker(t, origin, "back", true)
	leaver := c.admitWorker(t, origin, "leaver", true)
	lasting := c.admitWorker(t, origin, "lasting", false)
	setGossip(origin, map[string]string{"origin": "alive", "killed": "alive", "brief": "alive", "back": "alive",
		"leaver": "alive", "lasting": "alive"}, nil)
	awaitSweeps(t, origin, 2) // every record seen active and up

	// killed and back fail, leaver leaves (its record left), lasting and
	// (as gossip would never say of itself) the origin were down long ago.
	t1 := clk.Now()
	if err := origin.p.Write(within(t, 5*time.Second), &state.SetNodeState{NodeID: leaver.ID, State: state.NodeLeft,
		At: t1, Actor: "node:leaver"}); err != nil {
		t.Fatal(err)
	}
	long := t1.Add(-time.Hour)
	setSilent(origin, killed, brief, back, lasting) // down: no answer to the leader's probe either
	setGossip(origin, map[string]string{"origin": "failed", "killed": "failed", "brief": "alive", "back": "failed",
		"leaver": "left", "lasting": "failed"},
		map[string]time.Time{"origin": long, "killed": t1, "back": t1, "leaver": t1, "lasting": long})
	awaitSweeps(t, origin, 2)
	// Half a window on: brief fails; back is alive again (a restart
	// within the window: gossip forgets when it was last seen).
	clk.Add(window / 2)
	t2 := clk.Now()
	setGossip(origin, map[string]string{"origin": "failed", "killed": "failed", "brief": "failed", "back": "alive",
		"leaver": "left", "lasting": "failed"},
		map[string]time.Time{"origin": long, "killed": t1, "brief": t2, "leaver": t1, "lasting": long})
	awaitSweeps(t, origin, 2)
	for _, n := range []state.Node{killed, brief, back, leaver} {
		if got, ok := origin.p.Raft().FSM().Node(n.ID); !ok || got.State == state.NodeRemoved {
			t.Fatalf("%s removed within its window", n.Name)
		}
	}

	// killed and leaver pass the window by the leader's clock.
	clk.Add(window/2 + 10*time.Millisecond)
	waitFor(t, 10*time.Second, "killed and leaver removed and forgotten", func() bool {
		return forgotten(origin, killed.ID) && forgotten(origin, leaver.ID)
	})
	awaitSweeps(t, origin, 2)
	for _, n := range []state.Node{brief, back, lasting} {
		if got, _ := origin.p.Raft().FSM().Node(n.ID); got.State != state.NodeActive {
			t.Fatalf("%s is %s; want active (brief within its window, back restarted, lasting not ephemeral)", n.Name, got.State)
		}
	}
	if o, _ := origin.p.Raft().FSM().Node(origin.nodeID); o.State != state.NodeActive {
		t.Fatalf("the origin (this node, the CA holder) is %s", o.State)
	}
	// The removal's path: recorded removed by this node, acknowledged
	// by every active member (the round recorded), then forgotten.
	for _, n := range []state.Node{killed, leaver} {
		want := []string{string(codes.EventNodeRemoved) + " node:origin", string(codes.EventRevocationAcks) + " node:origin",
			string(codes.EventNodeForgotten) + " node:origin"}
		if got := auditOf(origin, n.Name); len(got) < 3 || !slices.Equal(got[len(got)-3:], want) {
			t.Fatalf("%s's audit trail ends %q, want %q", n.Name, got, want)
		}
		revoked := 0
		for _, r := range origin.p.Raft().FSM().Revocations() {
			if r.NodeID == n.ID {
				revoked++
			}
		}
		if revoked != 2 {
			t.Fatalf("%d revocations of %s kept, want its TLS and Nebula certificates", revoked, n.Name)
		}
		if origin.p.Raft().FSM().IPAllocated(n.OverlayIP) {
			t.Fatalf("%s's overlay IP %s still allocated", n.Name, n.OverlayIP)
		}
		if _, ok := origin.p.Raft().FSM().FormerNode(n.Name); ok {
			t.Fatalf("%s's name still held by a former record", n.Name)
		}
	}
	if asked.Load() < 2 {
		t.Fatalf("%d acknowledgement rounds asked, want one per removal", asked.Load())
	}
	reaped := origin.logs.withCode(codes.EventNodeReaped)
	if len(reaped) != 2 || origin.p.EphemeralReaped() != 2 {
		t.Fatalf("%d %s log records, %d counted; want 2", len(reaped), codes.EventNodeReaped, origin.p.EphemeralReaped())
	}
	for _, r := range reaped {
		if d := r.attrs["down"].Duration(); d < window {
			t.Fatalf("%s logged down %s, under the window %s", r.attrs["node"], d, window)
		}
	}
	rows, err := origin.p.Nodes(within(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(rows, func(r apitype.Node) bool { return r.Name == "killed" || r.Name == "leaver" }); i >= 0 {
		t.Fatalf("nodes still lists %s", rows[i].Name)
	}
	for _, r := range rows {
		if want := r.Name != "lasting"; r.Ephemeral != want {
			t.Fatalf("nodes shows %s ephemeral %v, want %v", r.Name, r.Ephemeral, want)
		}
	}

	// brief's window passes too; back (alive) and lasting never go.
	clk.Add(window / 2)
	waitFor(t, 10*time.Second, "brief removed and forgotten", func() bool { return forgotten(origin, brief.ID) })
	awaitSweeps(t, origin, 2)
	for _, n := range []state.Node{back, lasting} {
		if got, _ := origin.p.Raft().FSM().Node(n.ID); got.State != state.NodeActive {
			t.Fatalf("%s is %s", n.Name, got.State)
		}
	}
	// The freed name is admitted again: a new record, at the lowest free
	// address (killed's, the first one freed).
	again := c.admitWorkerID(t, origin, "id-killed-again", "killed", false)
	if again.OverlayIP != killed.OverlayIP || again.Prior != "" {
		t.Fatalf("killed admitted again at %s (prior %q); want a new record at the freed %s", again.OverlayIP, again.Prior, killed.OverlayIP)
	}
	for _, w := range origin.logs.warnings() {
		if _, coded := w.attrs["code"]; coded { // the stand-in gossip's refusals to notify carry none
			t.Fatalf("warning %s %v", w.msg, w.attrs)
		}
	}
}

// TestReapEphemeralLeaderOnly: a follower whose gossip has seen an
// ephemeral worker down for longer than the window does not remove it,
// at its sweeps or when asked to sweep; the leader, whose gossip sees it
// alive, does not either. Once leadership moves to that follower, which
// has timed the node down on its own clock all along, it removes it at
// its next sweep, without waiting a new window.
func TestReapEphemeralLeaderOnly(t *testing.T) {
	const window = 400 * time.Millisecond
	clk := &tokClock{now: time.Now()}
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, ephemeral: window,
		nows: map[string]func() time.Time{"c2": clk.Now}}
	origin := c.bootstrap(t, nil)
	c2 := c.joinControl(t, origin, "c2")
	var asked atomic.Int32
	answerRevocations(t, c, origin, &asked)
	answerRevocations(t, c, c2, &asked)
	w := c.admitWorker(t, origin, "w1", true)
	up := map[string]string{"origin": "alive", "c2": "alive", "w1": "alive"}
	setGossip(origin, up, nil)
	setGossip(c2, up, nil)
	awaitSweeps(t, c2, 2)

	setSilent(c2, w)
	setGossip(c2, map[string]string{"origin": "alive", "c2": "alive", "w1": "failed"}, map[string]time.Time{"w1": clk.Now()})
	awaitSweeps(t, c2, 2)
	clk.Add(2 * window)
	awaitSweeps(t, c2, 3)
	if n := c2.p.ReapEphemeral(within(t, 5*time.Second), clk.Now(), window); n != 0 {
		t.Fatalf("a follower removed %d nodes", n)
	}
	awaitSweeps(t, origin, 2)
	if n, _ := origin.p.Raft().FSM().Node(w.ID); n.State != state.NodeActive {
		t.Fatalf("w1 is %s with only a follower's gossip seeing it down", n.State)
	}

	leadOn(t, c2, origin)
	waitFor(t, 10*time.Second, "c2 removes and forgets w1", func() bool { return forgotten(c2, w.ID) })
	if c2.p.EphemeralReaped() != 1 || origin.p.EphemeralReaped() != 0 {
		t.Fatalf("removed by c2 %d, by origin %d; want 1 and 0", c2.p.EphemeralReaped(), origin.p.EphemeralReaped())
	}
	waitFor(t, 5*time.Second, "origin applies the forget", func() bool { return forgotten(origin, w.ID) })
}

// TestReapEphemeralForgetsRemoved: an ephemeral node an operator removed
// is forgotten by the sweep once its acknowledgement round is recorded;
// one recorded removed with no round (its remover stopped half way) only
// after forgetGrace on the leader's clock. The sweep removed neither.
func TestReapEphemeralForgetsRemoved(t *testing.T) {
	const window = 400 * time.Millisecond
	clk := &tokClock{now: time.Now()}
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, ephemeral: window,
		nows: map[string]func() time.Time{"origin": clk.Now}}
	origin := c.bootstrap(t, nil)
	var asked atomic.Int32
	answerRevocations(t, c, origin, &asked)
	op := c.admitWorker(t, origin, "op", true)
	cut := c.admitWorker(t, origin, "cut", true)
	setGossip(origin, map[string]string{"origin": "alive", "op": "alive", "cut": "alive"}, nil)

	resp, err := origin.p.RemoveAndConfirm(within(t, 10*time.Second), "op", "uid=0@origin", 0)
	if err != nil || len(resp.Pending) != 0 {
		t.Fatalf("remove op: %+v, %v", resp, err)
	}
	waitFor(t, 10*time.Second, "op forgotten", func() bool { return forgotten(origin, op.ID) })

	if err := origin.p.Write(within(t, 5*time.Second), &state.SetNodeState{NodeID: cut.ID, State: state.NodeRemoved,
		At: clk.Now(), Actor: "node:origin"}); err != nil {
		t.Fatal(err)
	}
	awaitSweeps(t, origin, 3)
	if n, ok := origin.p.Raft().FSM().Node(cut.ID); !ok || n.State != state.NodeRemoved {
		t.Fatalf("cut forgotten before its grace: %+v, %v", n, ok)
	}
	clk.Add(forgetGrace)
	waitFor(t, 10*time.Second, "cut forgotten after the grace", func() bool { return forgotten(origin, cut.ID) })
	if origin.p.EphemeralReaped() != 0 {
		t.Fatalf("the sweep counts %d removals; it removed none", origin.p.EphemeralReaped())
	}
}

// TestReapEphemeralRate: a sweep removes at most reapsPerSweep nodes,
// those down longest first; the next sweep takes the rest. (The planes'
// own sweeps use a window of an hour here and never act: the test
// sweeps with a minute.)
func TestReapEphemeralRate(t *testing.T) {
	clk := &tokClock{now: time.Now()}
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, ephemeral: time.Hour,
		nows: map[string]func() time.Time{"origin": clk.Now}}
	origin := c.bootstrap(t, nil)
	var asked atomic.Int32
	answerRevocations(t, c, origin, &asked)
	const total = reapsPerSweep + 4
	var nodes []state.Node
	for i := range total {
		nodes = append(nodes, c.admitWorker(t, origin, fmt.Sprintf("ci%02d", i), true))
	}
	ctx := within(t, 60*time.Second)
	origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute) // every record seen
	clk.Add(time.Duration(total) * time.Second)
	view, seen := map[string]string{"origin": "alive"}, map[string]time.Time{}
	for i, n := range nodes {
		view[n.Name] = "failed"
		seen[n.Name] = clk.Now().Add(-time.Duration(total-i) * time.Second) // ci00 down longest
	}
	setGossip(origin, view, seen)
	setSilent(origin, nodes...)
	origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute)
	clk.Add(time.Minute)
	if n := origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute); n != reapsPerSweep {
		t.Fatalf("a sweep removed %d of %d nodes due, want %d", n, total, reapsPerSweep)
	}
	for i, n := range nodes {
		if gone := forgotten(origin, n.ID); gone != (i < reapsPerSweep) {
			t.Fatalf("%s forgotten %v after the first sweep; want the %d down longest", n.Name, gone, reapsPerSweep)
		}
	}
	if n := origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute); n != total-reapsPerSweep {
		t.Fatalf("the next sweep removed %d, want %d", n, total-reapsPerSweep)
	}
	if n := origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute); n != 0 {
		t.Fatalf("a sweep with nothing due removed %d", n)
	}
}

// TestReapEphemeralRotationStalls: a removal whose gossip key rotation
// stalls (a live member never reports the new keyring) is still recorded:
// the failure is logged with its code, the node is forgotten all the
// same (its revocations stay), and the next node of the sweep is removed
// too.
func TestReapEphemeralRotationStalls(t *testing.T) {
	clk := &tokClock{now: time.Now()}
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, ephemeral: time.Hour,
		keyStep: 300 * time.Millisecond, nows: map[string]func() time.Time{"origin": clk.Now}}
	origin := c.bootstrap(t, nil)
	var asked atomic.Int32
	answerRevocations(t, c, origin, &asked)
	a := c.admitWorker(t, origin, "a", true)
	b := c.admitWorker(t, origin, "b", true)
	ctx := within(t, 30*time.Second)
	origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute)
	setSilent(origin, a, b)
	setGossip(origin, map[string]string{"origin": "alive", "a": "failed", "b": "failed"},
		map[string]time.Time{"a": clk.Now(), "b": clk.Now().Add(time.Second)})
	// b, still active while a is removed, shows alive in the keyring
	// reports and never reports a new keyring: a's rotation stalls. (b
	// runs the previous release, whose tags are waited for without a
	// probe: b does not answer the leader's probes, which let the sweep
	// remove it.)
	origin.hooks.mu.Lock()
	origin.hooks.reports = func() []KeyReport {
		return []KeyReport{{Name: "b", ID: b.ID, Alive: true, Keyring: "old", Legacy: true}}
	}
	origin.hooks.mu.Unlock()
	origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute)
	clk.Add(2 * time.Minute)
	if n := origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute); n != 2 {
		t.Fatalf("the sweep removed %d nodes, want a (its rotation stalled) and b", n)
	}
	for _, n := range []state.Node{a, b} {
		if !forgotten(origin, n.ID) {
			t.Fatalf("%s not forgotten", n.Name)
		}
	}
	if len(origin.logs.withCode(codes.KeyRotationStalled)) == 0 {
		t.Fatalf("the stalled rotation was not logged with %s", codes.KeyRotationStalled)
	}
	revoked := map[string]int{}
	for _, r := range origin.p.Raft().FSM().Revocations() {
		revoked[r.NodeID]++
	}
	if revoked[a.ID] != 2 || revoked[b.ID] != 2 {
		t.Fatalf("revocations kept: %v", revoked)
	}
}

// TestReapEphemeralGossipCutOff: a leader whose gossip sees no other
// control node alive (its own gossip cut off) sees every worker down and
// removes none, however long; once it sees a control node alive again it
// removes the worker that is still down.
func TestReapEphemeralGossipCutOff(t *testing.T) {
	clk := &tokClock{now: time.Now()}
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, ephemeral: time.Hour,
		nows: map[string]func() time.Time{"origin": clk.Now}}
	origin := c.bootstrap(t, nil)
	c2 := c.joinControl(t, origin, "c2")
	var asked atomic.Int32
	answerRevocations(t, c, origin, &asked)
	answerRevocations(t, c, c2, &asked)
	w := c.admitWorker(t, origin, "w1", true)
	leadOn(t, origin, c2)
	ctx := within(t, 60*time.Second)
	origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute) // every record seen
	setSilent(origin, w)
	setGossip(origin, map[string]string{"origin": "alive", "c2": "failed", "w1": "failed"},
		map[string]time.Time{"c2": clk.Now(), "w1": clk.Now()})
	origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute)
	clk.Add(time.Hour)
	if n := origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute); n != 0 || forgotten(origin, w.ID) {
		t.Fatalf("a leader cut off from every other control node removed %d nodes", n)
	}
	setGossip(origin, map[string]string{"origin": "alive", "c2": "alive", "w1": "failed"},
		map[string]time.Time{"w1": clk.Now().Add(-time.Hour)})
	if n := origin.p.ReapEphemeral(ctx, clk.Now(), time.Minute); n != 1 || !forgotten(origin, w.ID) {
		t.Fatalf("with c2 alive again the sweep removed %d, w1 forgotten %v; want 1, true", n, forgotten(origin, w.ID))
	}
}
