package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// WaitLeader returns once this node is the leader, or ctx ends
// (codes.NoLeader).
func (n *Node) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !n.IsLeader() {
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.NoLeader, fmt.Errorf("waiting for leadership: %w", ctx.Err()))
		case <-t.C:
		}
	}
	return nil
}

// WaitCaughtUp returns once the FSM has applied every entry that was on
// disk when raft opened (after a restart raft re-applies its log only once
// a leader commits in the new term), or fails with codes.NoLeader at ctx's
// end or after at most max.
func (n *Node) WaitCaughtUp(ctx context.Context, max time.Duration) error {
	if n.fsm.Index() >= n.openIndex {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for n.fsm.Index() < n.openIndex {
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.NoLeader, fmt.Errorf("raft has re-applied up to %d of %d since start; no leader has committed yet",
				n.fsm.Index(), n.openIndex))
		case <-t.C:
		}
	}
	return nil
}

// WaitApplied returns once the FSM has applied the command at index (an
// index from the leader's FSM, so a command index), or fails with
// codes.NoLeader when ctx ends first.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for n.fsm.Index() < index {
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.NoLeader, fmt.Errorf("applied %d of %d: %w", n.fsm.Index(), index, ctx.Err()))
		case <-t.C:
		}
	}
	return nil
}

// Apply commits cmd through raft and returns the FSM's answer: nil, a coded
// error, or a sentinel such as enroll.ErrIPTaken. Without leadership it is
// codes.NoLeader.
func (n *Node) Apply(ctx context.Context, cmd state.Command) error {
	_, err := n.ApplyAt(ctx, cmd)
	return err
}

// ApplyAt is Apply that also returns the entry's log index (0 when it
// failed before raft took it): a follower that forwarded the write waits
// for its own FSM to reach it (WaitApplied) rather than ask the leader for
// a read index.
func (n *Node) ApplyAt(ctx context.Context, cmd state.Command) (uint64, error) {
	b, err := state.Encode(cmd)
	if err != nil {
		return 0, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	start := time.Now()
	f := n.r.Apply(b, timeout)
	if err := f.Error(); err != nil {
		switch {
		case notLeading(err):
			return 0, codes.Wrap(codes.NoLeader, err)
		case diskFull(err):
			return 0, codes.Wrap(codes.DiskFull, err)
		default:
			return 0, codes.Wrap(codes.RaftApply, err)
		}
	}
	if n.observe != nil {
		n.observe(time.Since(start))
	}
	if resp, ok := f.Response().(error); ok && resp != nil {
		return f.Index(), resp
	}
	return f.Index(), nil
}

// VerifyLeader confirms with a quorum that this node still leads
// (codes.NoLeader if not).
func (n *Node) VerifyLeader() error {
	if err := n.r.VerifyLeader().Error(); err != nil {
		return codes.Wrap(codes.NoLeader, err)
	}
	return nil
}

// diskFull: raft formats the log store's error into its own with %q, so
// ENOSPC or EDQUOT are left only as text (the text names raft.db).
func diskFull(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}
