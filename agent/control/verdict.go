package control

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// The control nodes' liveness verdict (issue 54 item 3, docs/
// architecture.md "Gossip at 1,000 and 10,000 members", step 2 (ii)).
// Every control node is a Nebula lighthouse, and every member sends each
// one a host update every lighthouse interval; each control node's
// silence loop (agent/member/silence.go) lists the members it has not
// heard from for three intervals. Only the raft leader decides: each tick
// it takes the members silent on it, asks every other control node
// (PathHeard, one batch each) when it last heard them, and records a
// member unheard (state.Node.Unheard, one SetUnheard entry for the tick)
// when it is silent on the leader and on every control node that
// answered, and a majority of the control nodes (the leader counted)
// answered: a leader cut off from the others never marks the cluster
// unheard on its own view, as memberlist's indirect probes count only
// answers. A member on record unheard that any control node heard within
// three intervals is cleared (one answer suffices: hearing is evidence,
// silence only its absence). Nothing is set in a term's first three
// intervals: the new leader starts from its own view, and a view younger
// than that says nothing.
//
// Judged: active workers (relays are workers). Control nodes stay judged
// by gossip: they stay in its pool. Stock Nebula members (role nebula)
// report to the lighthouses too, but at Nebula's default interval (10 s:
// their bundle, nebulabundle, sets none, and bundles already handed out
// cannot be changed), so three of meshd's 2 s intervals would find them
// silent between every two updates: they are left out, as gossip leaves
// them out today.
//
// Cost per tick (issue 54: no timer loop touches every peer): the
// members silent on the leader and those on record unheard
// (state.FSM.Unheard, built with the records once per change), each
// looked up by address or id; one question per other control node when
// there is any to ask; never a read of the node list.
// TestVerdictCostsTheSilent counts it.

// verdictAskEach bounds one control node's answer; a tick asks them all
// at once.
const verdictAskEach = 2 * time.Second

// verdictRecords is what the verdict reads of raft: state.FSM.
type verdictRecords interface {
	Node(id string) (state.Node, bool)
	NodeByOverlayIP(addr netip.Addr) (state.Node, bool)
	Unheard() []string
}

// verdict is one term's liveness verdict on the leader.
type verdict struct {
	self  string // this node's id (the actor of its writes)
	lh    Lighthouse
	recs  verdictRecords
	now   func() time.Time
	began time.Time // this term's start on this node
	// others is the other control nodes to ask (raft's configuration,
	// active on record).
	others func() []state.Node
	ask    func(ctx context.Context, n state.Node, addrs []netip.Addr) (HeardAnswer, error)
	write  func(ctx context.Context, c state.SetUnheard) error

	// looked counts the records a tick read (tests).
	looked int
}

// judged reports whether the verdict decides n's liveness.
func judged(n state.Node) bool {
	return n.State == state.NodeActive && n.Role == pki.RoleWorker
}

// asked is one member a tick asks about.
type asked struct {
	id   string
	addr netip.Addr
	set  bool // on record unheard: the question is whether it is heard again
}

// tick decides once: the members silent here, and those on record
// unheard, asked about on the other control nodes, then written in one
// entry. It returns the changes written (tests).
func (v *verdict) tick(ctx context.Context) []state.UnheardChange {
	v.looked = 0
	after := v.lh.After()
	var (
		changes []state.UnheardChange
		qs      []asked
		seen    = map[netip.Addr]bool{} // asked already, as on record unheard
	)
	for _, id := range v.recs.Unheard() {
		n, ok := v.recs.Node(id)
		v.looked++
		if !ok || !judged(n) || !n.OverlayIP.IsValid() {
			continue
		}
		seen[n.OverlayIP] = true
		if age, ok := v.lh.Heard(n.OverlayIP); ok && age < after {
			changes = append(changes, state.UnheardChange{NodeID: id}) // heard here again
			continue
		}
		qs = append(qs, asked{id: id, addr: n.OverlayIP, set: true})
	}
	young := v.now().Sub(v.began) < after
	for _, addr := range v.lh.Silent() {
		if young {
			break
		}
		if seen[addr] {
			continue
		}
		n, ok := v.recs.NodeByOverlayIP(addr)
		v.looked++
		if !ok || !judged(n) || !n.Unheard.IsZero() {
			continue
		}
		qs = append(qs, asked{id: n.ID, addr: addr})
	}
	if len(qs) > maxHeardAsked {
		qs = qs[:maxHeardAsked] // the rest next tick
	}
	if len(qs) > 0 {
		changes = append(changes, v.decide(ctx, qs)...)
	}
	if len(changes) == 0 {
		return nil
	}
	if err := v.write(ctx, state.SetUnheard{Changes: changes, Actor: "node:" + v.self}); err != nil {
		return nil // the next tick finds the same members and tries again
	}
	return changes
}

// decide asks every other control node about qs and judges each: heard
// by any → cleared (if set); silent on the leader and on every control
// node that answered, with a majority of them answering → set.
func (v *verdict) decide(ctx context.Context, qs []asked) []state.UnheardChange {
	addrs := make([]netip.Addr, len(qs))
	for i, q := range qs {
		addrs[i] = q.addr
	}
	answers := []HeardAnswer{heardAnswer(v.lh, addrs)} // the leader's own
	others := v.others()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, verdictAskEach)
			defer cancel()
			a, err := v.ask(actx, n, addrs)
			if err != nil {
				return // no answer: not counted either way
			}
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	need := (len(others)+1)/2 + 1 // a majority of the control nodes, the leader counted
	at := v.now().UTC().Truncate(time.Second)
	var out []state.UnheardChange
	for i, q := range qs {
		heard, silent := false, 0
		for _, a := range answers {
			switch a.voteOf(i) {
			case voteHeard:
				heard = true
			case voteSilent:
				silent++
			}
		}
		switch {
		case q.set && heard:
			out = append(out, state.UnheardChange{NodeID: q.id})
		case !q.set && !heard && silent >= need:
			out = append(out, state.UnheardChange{NodeID: q.id, At: at})
		}
	}
	return out
}

// RunVerdict answers PathHeard from lh and runs the liveness verdict on
// it until ctx ends (the runtime spawns it on every control node whose
// Nebula is a lighthouse): it ticks every lighthouse interval only while
// this node leads (raftnode.WhileLeader), each term from its own view.
func (p *Plane) RunVerdict(ctx context.Context, lh Lighthouse, interval time.Duration) {
	p.lighthouse.Store(&lh)
	if p.raft == nil {
		return
	}
	p.raft.WhileLeader(ctx, func(ctx context.Context) {
		v := &verdict{self: p.cfg.NodeID, lh: lh, recs: p.raft.FSM(), now: p.now, began: p.now(),
			others: p.otherControls,
			ask: func(ctx context.Context, n state.Node, addrs []netip.Addr) (HeardAnswer, error) {
				return p.askHeard(ctx, n.EnrollAddr, addrs)
			},
			write: func(ctx context.Context, c state.SetUnheard) error {
				wctx, cancel := context.WithTimeout(ctx, interval)
				defer cancel()
				err := p.raft.Apply(wctx, c)
				if err != nil {
					p.log.Warn("liveness verdict not written", "err", err)
				}
				return err
			}}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				v.tick(ctx)
			}
		}
	})
}

// otherControls is the other servers of raft's configuration that are
// active control nodes on record with a control address: a handful
// (at most 7 voters and a few non-voters), read by id.
func (p *Plane) otherControls() []state.Node {
	var out []state.Node
	for id := range p.raft.Roles() {
		if id == p.cfg.NodeID {
			continue
		}
		if n, ok := p.raft.FSM().Node(id); ok && n.State == state.NodeActive && n.Role == pki.RoleControl && n.EnrollAddr != "" {
			out = append(out, n)
		}
	}
	return out
}
