package raftnode

import (
	"context"

	"github.com/hashicorp/raft"
)

// WhileLeader runs fn each time this node becomes the raft leader, with a
// context that ends when it stops leading (or ctx ends), and waits for
// fn to return before it looks again; it returns when ctx ends. Between
// terms it waits on raft's own state changes (a raft.Observer of
// raft.RaftState), not on a timer: a follower's leader-only loop costs
// nothing while it follows (issue 54 item 1: control.WatchCarriers ran a
// 250 ms tick on every control node for the leader's sake).
func (n *Node) WhileLeader(ctx context.Context, fn func(context.Context)) {
	changes := make(chan raft.Observation, 8)
	obs := raft.NewObserver(changes, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	n.r.RegisterObserver(obs) // before the first look: a change after it is seen
	defer n.r.DeregisterObserver(obs)
	for ctx.Err() == nil {
		if !n.IsLeader() {
			select {
			case <-ctx.Done():
			case <-changes: // a dropped observation is harmless: any one makes this look again
			}
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn(lctx)
		}()
		for n.IsLeader() && lctx.Err() == nil {
			select {
			case <-lctx.Done():
			case <-changes:
			}
		}
		cancel()
		<-done
	}
}
