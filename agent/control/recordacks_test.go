package control

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestOutOfPoolAcksByRecord: a removal asks the members gossip lists over
// gossip and reads the acknowledgement of a worker out of the pool from
// its record: w1 (out of the pool) reports by its facts the revocation
// version its Nebula blocks and is acknowledged within the round; w2 (out
// of the pool) reports nothing and is pending; w3, in the pool, answers
// the gossip query. Its facts also set its NAT and out of the pool on its
// record, which the worker's record list carries. Refused: a NAT word not
// in NATWords, a control node saying it is out of the pool, a version far
// beyond the list.
func TestOutOfPoolAcksByRecord(t *testing.T) {
	c, origin := newCluster(t)
	_, w1 := c.worker(t, origin, "w1")
	c.worker(t, origin, "w2")
	c.worker(t, origin, "w3")
	c.worker(t, origin, "gone")
	ctx := within(t, 30*time.Second)

	if err := w1.Call(ctx, origin.addr, PathSelfFacts, false, FactsRequest{NAT: "sym", Pool: state.PoolOut}, nil); err != nil {
		t.Fatalf("w1 reports its NAT and that it is out of the pool: %v", err)
	}
	if n, _ := origin.p.Raft().FSM().Node("id-w1"); n.NAT != "sym" || !n.OutOfPool {
		t.Fatalf("w1's record: nat %q out %v", n.NAT, n.OutOfPool)
	}
	for _, r := range origin.p.Records() {
		if r.Name == "w1" && (r.NAT != "sym" || !r.OutOfPool) {
			t.Errorf("w1's node record: nat %q out %v", r.NAT, r.OutOfPool)
		}
	}
	for what, req := range map[string]FactsRequest{
		"a NAT word not known":  {NAT: "weird"},
		"a pool word not known": {Pool: "maybe"},
		"a version far beyond":  {Revoked: origin.p.RevocationVersion() + RevokedMargin + 1},
	} {
		if err := w1.Call(ctx, origin.addr, PathSelfFacts, false, req, nil); codes.Of(err) != codes.BadRequest {
			t.Errorf("%s: %v, want %s", what, err, codes.BadRequest)
		}
	}
	if err := origin.p.ReportOwnFacts(ctx, FactsRequest{Pool: state.PoolOut}); codes.Of(err) != codes.BadRequest {
		t.Errorf("a control node out of the pool: %v, want %s", err, codes.BadRequest)
	}

	// The pool is origin and w3 (gossip lists them); w3 answers the query.
	setGossip(origin, map[string]string{"origin": "alive", "w3": "alive", "gone": "alive"}, nil)
	origin.hooks.mu.Lock()
	origin.hooks.ask = func(_ context.Context, name string, payload []byte, _ time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error) {
		var q RevocationQuery
		if name != RevocationQueryName || json.Unmarshal(payload, &q) != nil {
			return nil, errNoGossip
		}
		answers := map[string][]byte{"w3": ack(t, c, "w3", "w3", q.Version, q.Nonce), "origin": ack(t, c, "origin", "origin", q.Version, q.Nonce)}
		done(answers)
		return answers, nil
	}
	origin.hooks.mu.Unlock()

	type result struct {
		resp *apitype.RemoveResponse
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := origin.p.RemoveAndConfirm(ctx, "gone", "test", 3*time.Second)
		res <- result{resp, err}
	}()
	// w1 blocks the new list: it reports its version once the removal is recorded.
	waitFor(t, 10*time.Second, "gone recorded removed", func() bool {
		n, ok := origin.p.Raft().FSM().Node("id-gone")
		return ok && n.State == state.NodeRemoved
	})
	if err := w1.Call(ctx, origin.addr, PathSelfFacts, false, FactsRequest{Revoked: origin.p.RevocationVersion()}, nil); err != nil {
		t.Fatalf("w1 reports the version it blocks: %v", err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !slices.Contains(r.resp.Acked, "w1") || !slices.Contains(r.resp.Acked, "w3") || !slices.Equal(r.resp.Pending, []string{"w2"}) {
		t.Fatalf("acked %v pending %v; want w1 (by its record) and w3 (by gossip) acked, w2 pending", r.resp.Acked, r.resp.Pending)
	}
	t.Logf("w1 acknowledged by its record %v after the round began", r.resp.LastAck.Round(time.Millisecond))
}

// TestPoolMembersSkipsRecordedOut: a worker its record says is out of
// the pool is not asked over gossip, though gossip still lists it (it
// was a member before it restarted with gossip_pool: false).
func TestPoolMembersSkipsRecordedOut(t *testing.T) {
	expect := map[string]state.Node{"w1": {OutOfPool: true}, "w2": {}}
	got := poolMembers(expect, map[string]string{"w1": "failed", "w2": "alive"})
	if len(got) != 1 || !got["w2"] {
		t.Errorf("waited over gossip for %v, want w2 alone", got)
	}
	view := outOfPool([]state.Node{{Name: "w1", Role: pki.RoleWorker, State: state.NodeActive, OutOfPool: true}},
		map[string]string{"w1": "failed"}, nil)
	if view["w1"] != "alive" {
		t.Errorf("w1 recorded out of the pool, heard: shown %q, want alive (its record's word over gossip's stale one)", view["w1"])
	}
}
