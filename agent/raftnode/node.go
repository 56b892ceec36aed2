package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// Node is this control node's raft: bolt log and stable store, file
// snapshots, and a stream layer.
type Node struct {
	// openIndex is the index of the last command in the log on disk when
	// raft opened: after a restart, reads wait until the FSM has applied
	// at least this far.
	openIndex uint64
	id        raft.ServerID
	r         *raft.Raft
	fsm       *state.FSM
	store     *raftboltdb.BoltStore
	trans     *raft.NetworkTransport
	stream    *TLSStreamLayer
	observe   func(time.Duration) // Options.ObserveApply; nil: none
	readyTerm atomic.Uint64       // the term whose barrier LeaderReady saw applied (ready.go)
}

// Timing tunes raft's timers.
type Timing struct {
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	LeaderLease      time.Duration
}

// Options are what Open needs.
type Options struct {
	Dir    string // raft.db and snapshots/
	NodeID string
	Timing Timing
	Stream *TLSStreamLayer // owned by the Node from Open on
	// Log receives raft's, its transport's and its snapshot store's own
	// lines (hclog.go); its handler's level decides which are shown. nil
	// discards them.
	Log *slog.Logger
	// ObserveApply, if set, is told how long each write this node led
	// took from Apply to applied (commit by a quorum, then the FSM): the
	// agent's meshd_raft_apply_duration_seconds.
	ObserveApply func(time.Duration)
}

// HasState reports whether dir holds raft state from an earlier run.
func HasState(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "raft.db"))
	return err == nil
}

// Open starts raft from dir (creating it 0700). The stream layer is closed
// if Open fails.
func Open(o Options) (_ *Node, err error) {
	defer func() {
		if err != nil && o.Stream != nil {
			_ = o.Stream.Close()
		}
	}()
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, codes.Wrap(codes.StateDir, err)
	}
	dbPath := filepath.Join(o.Dir, "raft.db")
	store, openIndex, err := openStore(dbPath)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(o.Dir, 2, newHCLog(o.Log, "raft-snapshot"))
	if err != nil {
		_ = store.Close()
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("open raft snapshots: %w", err))
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	if o.Stream == nil {
		_ = store.Close()
		return nil, errors.New("raftnode: no stream layer")
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  o.Stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  newHCLog(o.Log, "raft-net"),
	})
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(o.NodeID)
	conf.HeartbeatTimeout = o.Timing.HeartbeatTimeout
	conf.ElectionTimeout = o.Timing.ElectionTimeout
	conf.LeaderLeaseTimeout = o.Timing.LeaderLease
	conf.ShutdownOnRemove = false
	conf.Logger = newHCLog(o.Log, "raft")
	fsm := state.New()
	r, err := raft.NewRaft(conf, fsm, logs, store, snaps, trans)
	if err != nil {
		_ = trans.Close() // closes the stream layer too
		_ = store.Close()
		if strings.Contains(err.Error(), "snapshot") {
			// raft tried every snapshot and none restored (each was
			// checked against its CRC and size).
			return nil, codes.Wrap(codes.StateCorrupt, fmt.Errorf("raft snapshots in %s: %w",
				filepath.Join(o.Dir, "snapshots"), err))
		}
		return nil, fmt.Errorf("start raft: %w", err)
	}
	n := &Node{openIndex: openIndex, id: conf.LocalID, r: r, fsm: fsm, store: store, trans: trans, stream: o.Stream,
		observe: o.ObserveApply}
	o.Stream.setPeers(n.peerAddrs)
	return n, nil
}

// peerAddrs are the addresses of raft's configured servers (this one
// included): the sources whose handshakes get reserved slots on the raft
// port (slots.go).
func (n *Node) peerAddrs() []netip.Addr {
	f := n.r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []netip.Addr
	for _, s := range f.Configuration().Servers {
		if ap, err := netip.ParseAddrPort(string(s.Address)); err == nil {
			out = append(out, ap.Addr().Unmap())
		}
	}
	return out
}

// openStore opens raft.db and reads every log entry in it once, so that a
// truncated or garbled file is refused here, with codes.StateCorrupt naming
// it, and not found by raft later. bbolt panics on a page it cannot make
// sense of (and faults on one past the end of a short file): both are
// turned into that error. A corrupt log is never rebuilt, not even a
// follower's: its stable store holds the term and the vote, and a voter
// that forgets its vote can vote twice in one term.
func openStore(path string) (store *raftboltdb.BoltStore, openIndex uint64, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			// The half-open store is not closed: its state is unknown, and
			// meshd exits on this error.
			store, openIndex = nil, 0
			err = codes.Wrap(codes.StateCorrupt, fmt.Errorf("%s: %v", path, p))
		}
	}()
	store, err = raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: 5 * time.Second}})
	if err != nil {
		return nil, 0, codes.Wrap(codes.StateCorrupt, fmt.Errorf("open raft store %s: %w", path, err))
	}
	if err := checkLog(store); err != nil {
		_ = store.Close()
		return nil, 0, codes.Wrap(codes.StateCorrupt, fmt.Errorf("read raft log %s: %w", path, err))
	}
	if _, err := store.GetUint64([]byte("CurrentTerm")); err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		_ = store.Close()
		return nil, 0, codes.Wrap(codes.StateCorrupt, fmt.Errorf("read raft term %s: %w", path, err))
	}
	openIndex, err = lastCommandIndex(store)
	if err != nil {
		_ = store.Close()
		return nil, 0, codes.Wrap(codes.StateCorrupt, fmt.Errorf("read raft log %s: %w", path, err))
	}
	return store, openIndex, nil
}

// checkLog decodes every entry between the log's first and last index.
func checkLog(store raft.LogStore) error {
	first, err := store.FirstIndex()
	if err != nil {
		return err
	}
	last, err := store.LastIndex()
	if err != nil {
		return err
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return fmt.Errorf("entry %d of %d..%d: %w", i, first, last, err)
		}
	}
	return nil
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

// Bootstrap makes this node the single voter of a new cluster. Call it only
// when no raft state existed before Open.
func (n *Node) Bootstrap(addr net.Addr) error {
	f := n.r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: n.id, Address: raft.ServerAddress(addr.String()),
	}}})
	return f.Error()
}

// SetPeerCheck makes the raft port admit only peers v accepts, and closes
// the open connections v refuses at once (see TLSStreamLayer.SetVerify).
func (n *Node) SetPeerCheck(v Verify) { n.stream.SetVerify(v) }

// RecheckPeers closes every open raft connection whose peer the check now
// refuses, and returns how many.
func (n *Node) RecheckPeers() int { return n.stream.Recheck() }

// FSM is the state raft applies to: the cluster's records, read-only for
// everything but raft.
func (n *Node) FSM() *state.FSM { return n.fsm }

// Close shuts raft down and closes the transport and the store.
func (n *Node) Close() error {
	err := n.r.Shutdown().Error()
	_ = n.trans.Close()
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}
