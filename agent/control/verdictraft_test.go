package control

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestVerdictOverRaft: two control nodes over real raft and mTLS, a
// worker silent on both. A follower's RunVerdict writes nothing (only
// the leader decides); the leader's asks the follower over PathHeard and
// records the worker unheard, which every node reads; heard again on
// the follower alone, it is cleared. A worker's leaf may not ask.
func TestVerdictOverRaft(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	wid, wkeys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, wkeys, enroll.Ports{}, wid)
	w1, _ := origin.p.Raft().FSM().Node("id-w1")
	now := time.Now()
	lh := func() *fakeLighthouse {
		return &fakeLighthouse{now: &now, at: map[netip.Addr]time.Time{w1.OverlayIP: now.Add(-time.Minute)},
			listening: time.Hour, after: 150 * time.Millisecond}
	}
	olh, clh := lh(), lh()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{}, 2)
	go func() { c2.p.RunVerdict(ctx, clh, 50*time.Millisecond); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	// The follower alone runs: it answers, and never ticks (checked
	// below, once the leader's verdict is in).
	waitFor(t, 5*time.Second, "c2 answers PathHeard", func() bool {
		a, err := origin.p.askHeard(ctx, c2.addr, []netip.Addr{w1.OverlayIP})
		return err == nil && a.voteOf(0) == voteSilent
	})

	go func() { origin.p.RunVerdict(ctx, olh, 50*time.Millisecond); done <- struct{}{} }()
	waitFor(t, 10*time.Second, "w1 unheard on both control nodes", func() bool {
		a, _ := origin.p.Raft().FSM().Node("id-w1")
		b, _ := c2.p.Raft().FSM().Node("id-w1")
		return !a.Unheard.IsZero() && !b.Unheard.IsZero()
	})
	if n := clh.calls(); n != 0 {
		t.Errorf("the follower's verdict ticked: %d looks at its silent list", n)
	}
	rows := origin.p.nodeRows()
	for _, r := range rows {
		if r.Name == "w1" && r.Unheard.IsZero() {
			t.Errorf("GET /v1/nodes row of w1 shows no unheard: %+v", r)
		}
	}

	// Heard again on c2 only: cleared.
	clh.set(w1.OverlayIP, now)
	waitFor(t, 10*time.Second, "w1 heard again", func() bool {
		a, _ := origin.p.Raft().FSM().Node("id-w1")
		return a.Unheard.IsZero()
	})

	// A malformed or oversized question is refused.
	for _, bad := range []HeardRequest{{Addrs: []string{"not-an-ip"}}, {Addrs: make([]string, maxHeardAsked+1)}} {
		err := origin.p.client.Call(within(t, 5*time.Second), c2.addr, PathHeard, true, bad, nil)
		if codes.Of(err) != codes.BadRequest {
			t.Errorf("a question of %d addresses (%.10q...): %v, want %s", len(bad.Addrs), bad.Addrs[0], err, codes.BadRequest)
		}
	}

	// A worker may not ask.
	wc, err := NewClient(wid)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.CloseIdle()
	var a HeardAnswer
	err = wc.Call(within(t, 5*time.Second), origin.addr, PathHeard, false, HeardRequest{Addrs: []string{w1.OverlayIP.String()}}, &a)
	if codes.Of(err) != codes.PeerRoleDenied {
		t.Fatalf("a worker asked PathHeard: %v, want %s", err, codes.PeerRoleDenied)
	}
}
