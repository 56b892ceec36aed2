package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// raftNode is this control node's raft: bolt log and stable store, file
// snapshots, and the mTLS stream layer.
type raftNode struct {
	// openIndex is the index of the last command in the log on disk when
	// raft opened: after a restart, reads wait until the FSM has applied
	// at least this far.
	openIndex uint64
	r         *raft.Raft
	fsm       *state.FSM
	store     *raftboltdb.BoltStore
	trans     *raft.NetworkTransport
}

type raftOptions struct {
	dir       string
	nodeID    string
	bind      string
	advertise net.Addr
	timing    RaftTiming
	stream    *tlsStreamLayer
	logOutput io.Writer
}

// hasRaftState reports whether dir holds raft state from an earlier run.
func hasRaftState(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "raft.db"))
	return err == nil
}

func openRaft(o raftOptions) (*raftNode, error) {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, codes.Wrap(codes.StateDir, err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(o.dir, "raft.db")})
	if err != nil {
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("open raft store: %w", err))
	}
	snaps, err := raft.NewFileSnapshotStore(o.dir, 2, o.logOutput)
	if err != nil {
		_ = store.Close()
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("open raft snapshots: %w", err))
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  o.stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hclog.New(&hclog.LoggerOptions{Name: "raft-net", Output: o.logOutput, Level: hclog.Warn}),
	})
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(o.nodeID)
	conf.HeartbeatTimeout = o.timing.HeartbeatTimeout
	conf.ElectionTimeout = o.timing.ElectionTimeout
	conf.LeaderLeaseTimeout = o.timing.LeaderLease
	conf.ShutdownOnRemove = false
	conf.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: o.logOutput, Level: hclog.Warn})
	openIndex, err := lastCommandIndex(store)
	if err != nil {
		_ = store.Close()
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("read raft log: %w", err))
	}
	fsm := state.New()
	r, err := raft.NewRaft(conf, fsm, logs, store, snaps, trans)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	return &raftNode{openIndex: openIndex, r: r, fsm: fsm, store: store, trans: trans}, nil
}

// lastCommandIndex finds the last command entry in the log (configuration
// entries never reach the FSM, so its index cannot be waited for). Entries
// before the log's first index live in a snapshot, which raft restores
// before NewRaft returns.
func lastCommandIndex(store raft.LogStore) (uint64, error) {
	first, err := store.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := store.LastIndex()
	if err != nil {
		return 0, err
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return 0, err
		}
		if l.Type == raft.LogCommand {
			return i, nil
		}
	}
	return 0, nil
}

// bootstrap makes this node the single voter of a new cluster. Call it only
// when no raft state existed before openRaft.
func (n *raftNode) bootstrap(id string, addr net.Addr) error {
	f := n.r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr.String()),
	}}})
	return f.Error()
}

// waitLeader returns once this node is the leader, or ctx ends.
func (n *raftNode) waitLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for n.r.State() != raft.Leader {
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.NoLeader, fmt.Errorf("waiting for leadership: %w", ctx.Err()))
		case <-t.C:
		}
	}
	return nil
}

// waitCaughtUp returns once the FSM has applied every entry that was on
// disk when raft opened (after a restart raft re-applies its log only once
// a leader commits in the new term), or fails with codes.NoLeader at ctx's
// end or after at most max.
func (n *raftNode) waitCaughtUp(ctx context.Context, max time.Duration) error {
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

// waitApplied returns once the FSM has applied the command at index (an
// index from the leader's FSM, so a command index), or fails with
// codes.NoLeader when ctx ends first.
func (n *raftNode) waitApplied(ctx context.Context, index uint64) error {
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

// apply commits cmd through raft and returns the FSM's answer: nil, a coded
// error, or a sentinel such as enroll.ErrIPTaken.
func (n *raftNode) apply(ctx context.Context, cmd state.Command) error {
	b, err := state.Encode(cmd)
	if err != nil {
		return err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	f := n.r.Apply(b, timeout)
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
			return codes.Wrap(codes.NoLeader, err)
		default:
			return codes.Wrap(codes.RaftApply, err)
		}
	}
	if resp, ok := f.Response().(error); ok && resp != nil {
		return resp
	}
	return nil
}

// roles returns each server's raft role by node id: leader, voter, nonvoter.
func (n *raftNode) roles() map[string]string {
	out := map[string]string{}
	f := n.r.GetConfiguration()
	if f.Error() != nil {
		return out
	}
	_, leader := n.r.LeaderWithID()
	for _, s := range f.Configuration().Servers {
		switch {
		case s.ID == leader:
			out[string(s.ID)] = "leader"
		case s.Suffrage == raft.Voter:
			out[string(s.ID)] = "voter"
		default:
			out[string(s.ID)] = "nonvoter"
		}
	}
	return out
}

// handOff transfers leadership before a planned stop when another voter
// can take it (about 5 ms), instead of leaving the cluster to notice a dead
// leader (1-2 s). A restart is not a departure: membership stays as it is.
func (n *raftNode) handOff() error {
	if n.r.State() != raft.Leader {
		return nil
	}
	voters := 0
	if f := n.r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
	}
	if voters < 2 {
		return nil
	}
	return n.r.LeadershipTransfer().Error()
}

func (n *raftNode) close() error {
	err := n.r.Shutdown().Error()
	_ = n.trans.Close()
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}
