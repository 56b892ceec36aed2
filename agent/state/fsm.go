package state

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/enroll"
)

// FSM is the raft finite state machine holding the cluster state. Reads
// return copies and are safe to call concurrently with Apply.
type FSM struct {
	mu sync.RWMutex
	s  Snapshot
	// index is the raft index of the last command this FSM applied (or of
	// the snapshot it was restored from). raft's own AppliedIndex runs a
	// little ahead of the FSM, which applies on its own goroutine.
	index atomic.Uint64
	// changed is signalled (never blocking Apply) after a command that
	// changed node records was applied, and after a restore.
	changed chan struct{}
	// applied is signalled like changed, after every command applied
	// (refused ones too: the index moved) and after a restore.
	applied chan struct{}
	// view is the node records as Nodes, View, Node and NodeByName read
	// them (records.go): built by the first read after a change and
	// shared by every read until the next, nil after each applied
	// command and restore. A control node reads the whole list several
	// times per applied command (overlay, names, revocations, renewals)
	// and a record by id on every call to port 7300; copying and
	// sorting the list for each read was a third of a 1,000-join
	// burst's CPU, copying it still 14% (docs/performance.md).
	view atomic.Pointer[records]
	// guard, set by TestOnlyGuardShared, is told of a reader that wrote
	// into the shared records.
	guard func(error)
}

var _ raft.FSM = (*FSM)(nil)

// New returns an FSM with no cluster.
func New() *FSM {
	f := &FSM{changed: make(chan struct{}, 1), applied: make(chan struct{}, 1)}
	f.s.normalise()
	return f
}

// Apply decodes and applies one raft log entry. It returns nil on success,
// or the error: a coded error, enroll.ErrIPTaken, or a decode error. A
// failed command changes nothing. Apply is deterministic: it reads no clock
// and draws no randomness.
func (f *FSM) Apply(l *raft.Log) any {
	c, err := Decode(l.Data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer poke(f.applied)
	defer f.index.Store(max(f.index.Load(), l.Index))
	f.guardLocked()
	err = f.s.apply(c) // a Tracked command applies the one it carries, once per request id
	if err == nil {
		f.view.Store(nil) // any command may touch a record; the next read rebuilds
	}
	if err == nil && changesNodes(c) {
		f.signal()
	}
	return err
}

// NodesChanged is signalled after raft applied a command that changed
// node records (an admission, a state change such as a removal, a
// renewal) or restored a snapshot. It holds at most one pending signal:
// a reader that wakes up reads the records as they are then. Apply never
// waits for a reader; the state itself does not depend on it.
func (f *FSM) NodesChanged() <-chan struct{} { return f.changed }

func (f *FSM) signal() { poke(f.changed) }

// Applied is signalled after every command raft applied (the index
// moved, whether or not the command changed anything) and after a
// restore, holding at most one pending signal like NodesChanged: the
// watch table (agent/control/watch.go) follows the index by it.
func (f *FSM) Applied() <-chan struct{} { return f.applied }

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// changesNodes reports whether applying c (successfully) may have changed
// a node record. A Tracked command is judged by the command it carries.
func changesNodes(c Command) bool {
	if t, ok := c.(Tracked); ok {
		inner, err := Decode(t.Inner)
		if err != nil {
			return false
		}
		c = inner
	}
	switch c.(type) {
	case Bootstrap, Admit, SetNodeState, RenewNebula, RenewTLS, RecordCerts, AbortAdmission, ConfirmJoin, FailJoin, AbortJoin,
		SetCAHolder, // custody follows the record: the old holder releases its copy
		RotateCA,    // the trust bundles every node follows
		ForgetNode,  // an ephemeral node's record deleted
		// What a record offers and carries: a relay, routes (issue 33).
		SetRelay, AdvertiseRoutes, ApproveRoute, WithdrawRoute, SetCarrier,
		SetUnheard: // the control nodes' liveness verdict (issue 54)
		return true
	}
	return false
}

// Index is the raft index of the last command applied (or restored).
func (f *FSM) Index() uint64 { return f.index.Load() }

// apply applies one decoded command to s (Command.applyTo).
func (s *Snapshot) apply(c Command) error { return c.applyTo(s) }

// Snapshot returns a deep copy of the state, taken under the lock; raft
// persists it while Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{s: f.snapshot()}, nil
}

// Restore replaces all state with the snapshot read from rc.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := ReadSnapshot(rc)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.guardLocked()
	f.s = *s
	f.view.Store(nil)
	f.index.Store(s.Index)
	f.signal()
	poke(f.applied)
	return nil
}

// snapshot returns a deep copy of the state.
func (f *FSM) snapshot() *Snapshot {
	f.mu.RLock()
	defer f.mu.RUnlock()
	c := f.s.clone()
	c.Index = f.index.Load()
	return c
}

type fsmSnapshot struct{ s *Snapshot }

// Persist writes the snapshot to sink and closes it, or cancels it on error.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := WriteSnapshot(sink, s.s); err != nil {
		return errors.Join(err, sink.Cancel())
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds no resources.
func (*fsmSnapshot) Release() {}

// Cluster returns the cluster facts; ok is false before Bootstrap.
func (f *FSM) Cluster() (Cluster, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.s.Cluster == nil {
		return Cluster{}, false
	}
	return f.s.Cluster.clone(), true
}

// Nodes returns every node record, removed ones included, sorted by name
// (then id). The slice and its records are shared with every other
// reader of the same state (records.go), built once after a change:
// read them, never write into them. A record taken by value (a range
// loop's variable) may be changed, but not the arrays of its slices
// (certificates, keys, Retired, Groups, Routes); to reorder or edit
// the list, slices.Clone it first.
func (f *FSM) Nodes() []Node { return f.records().sorted }

// View is what a worker copies from raft, read as of one index: every
// node record (as Nodes gives them: shared, read-only), the revocations,
// the cluster record (ok is false before Bootstrap) and the index of the
// state they are. Nothing is applied while it reads, so no part is newer
// than the index (the watch table stamps items with it:
// agent/control/watch.go).
type View struct {
	Index       uint64
	Nodes       []Node
	Revocations []Revocation
	Cluster     Cluster
	HasCluster  bool
}

// View reads View.
func (f *FSM) View() View {
	f.mu.RLock()
	defer f.mu.RUnlock()
	v := View{Index: f.index.Load(), Nodes: f.recordsLocked().sorted, Revocations: slices.Clone(f.s.Revocations)}
	if f.s.Cluster != nil {
		v.Cluster, v.HasCluster = f.s.Cluster.clone(), true
	}
	return v
}

// Node returns the node with the given id: from the shared records when
// they are built (its slices shared and read-only, as Nodes' are), else
// a copy of the state's record, without building them for one lookup.
func (f *FSM) Node(id string) (Node, bool) {
	if r := f.view.Load(); r != nil {
		return r.node(id)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if r := f.view.Load(); r != nil { // built meanwhile
		return r.node(id)
	}
	n, ok := f.s.Nodes[id]
	return n.clone(), ok
}

// NodeByName returns the node that holds name; former nodes (left,
// removed, failed) hold none and are ignored. Its slices are shared and
// read-only, as Nodes' are.
func (f *FSM) NodeByName(name string) (Node, bool) { return f.records().holder(name) }

// FormerNode returns the record of a former node (left, removed or
// failed) named name, which the next admission of that name reuses.
func (f *FSM) FormerNode(name string) (Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.s.formerByName(name)
	return n.clone(), ok
}

// Token returns the record of the token whose secret hashes to h.
func (f *FSM) Token(h enroll.TokenHash) (enroll.TokenRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.s.Tokens[h]
	return r, ok
}

// Tokens returns every token record, sorted by creation time (then hash).
func (f *FSM) Tokens() []enroll.TokenRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]enroll.TokenRecord, 0, len(f.s.Tokens))
	for _, r := range f.s.Tokens {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b enroll.TokenRecord) int {
		return cmp.Or(a.Created.Compare(b.Created), slices.Compare(a.Hash[:], b.Hash[:]))
	})
	return out
}

// IPAllocated reports whether ip is allocated to a node record.
func (f *FSM) IPAllocated(ip netip.Addr) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.s.IPAM[ip.Unmap()]
	return ok
}

// FreeIP returns the lowest unallocated host address of the cluster
// overlay, skipping the network and broadcast addresses. It reserves
// nothing: Admit is the compare-and-set. With no cluster it fails with
// codes.NotInCluster; with the overlay full, codes.Internal.
func (f *FSM) FreeIP() (netip.Addr, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.freeIP()
}

// Revocations returns the revoked certificates, oldest first.
func (f *FSM) Revocations() []Revocation {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.s.Revocations)
}

// Audit returns the audit ring, oldest first.
func (f *FSM) Audit() []AuditEvent {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.s.Audit)
}

// PrunableJTIs is how many JWT replay records PruneTokens{Before:
// before} would remove: those of JWTs that expired before it.
func (f *FSM) PrunableJTIs(before time.Time) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for _, u := range f.s.JTIs {
		if u.Expires.Before(before) {
			n++
		}
	}
	return n
}
