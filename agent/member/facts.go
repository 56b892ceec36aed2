package member

import (
	"context"
	"reflect"
	"slices"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/pki"
)

// clusterFacts is where this node's cluster facts come from, decided once
// in startRuntime: a control node reads its raft (planeFacts, over its
// control.Plane), a worker holds the copies it fetched from one
// (fetched.Copies). The runtime asks this, never the role.
type clusterFacts interface {
	// Records are the cluster's node records (every state, this node's
	// too); ok is false on a worker before its first node list.
	Records() ([]control.NodeRecord, bool)
	// RecordsSince is what changed in Records after version since
	// (fetched.RecordDelta): a worker's copies hand only the records that
	// changed, from their change log; a control node's raft hands the
	// whole list every time (Whole).
	RecordsSince(since uint64) fetched.RecordDelta
	// Record is the record with id (any state), if on record.
	Record(id string) (control.NodeRecord, bool)
	// Seeds are the control nodes' addresses this node asks, in order.
	Seeds() []string
	// SerfPeers are the gossip addresses this node rejoins through.
	SerfPeers() []string
	// Revocations is what every Nebula must block.
	Revocations() control.Revocations
	// Refresh brings Records and Revocations up to date: a worker
	// fetches them (at once when told, else when due); a control node,
	// when told, makes sure its raft has applied what the leader
	// committed (a read index). changed says a worker's copies changed
	// (a control node's raft pokes its overlay itself); the error is the
	// node list's.
	Refresh(ctx context.Context, told bool) (changed bool, err error)
	// GossipKeys and CABundle are the cluster's gossip keyring and CA
	// trust bundles; ok is false when there is nothing (new) to apply.
	GossipKeys(ctx context.Context, told bool) (control.GossipKeys, bool)
	CABundle(ctx context.Context, told bool) (control.CABundle, bool)
	// OwnNebulaCert and OwnTLSCert are this node's current certificates
	// as the cluster holds them (renewed, or reissued by a CA rotation);
	// a worker fetches the Nebula one only when due.
	OwnNebulaCert(ctx context.Context, due bool) ([]byte, error)
	OwnTLSCert(ctx context.Context) ([]byte, error)
	// NodeRows are `meshctl nodes`' rows.
	NodeRows(ctx context.Context) ([]apitype.Node, error)
	// Settle returns once this node's own view holds what the cluster
	// committed before the call: a read index on a control node (which
	// answers others from it); nothing on a worker.
	Settle(ctx context.Context) error
}

var (
	_ clusterFacts = planeFacts{}
	_ clusterFacts = (*fetched.Copies)(nil)
)

// planeFacts are a control node's cluster facts: its own raft.
type planeFacts struct {
	p      *control.Plane
	nodeID string
	seeds  []string // the seeds the join named (a control node asks others only to forward)
}

func (f planeFacts) Records() ([]control.NodeRecord, bool) { return f.p.Records(), true }

func (f planeFacts) RecordsSince(uint64) fetched.RecordDelta {
	return fetched.RecordDelta{Known: true, Whole: true, All: f.p.Records()}
}

func (f planeFacts) Record(id string) (control.NodeRecord, bool) {
	return findRecord(f.p.Records(), id)
}

// findRecord is the record with id in list: O(records).
func findRecord(list []control.NodeRecord, id string) (control.NodeRecord, bool) {
	if i := slices.IndexFunc(list, func(r control.NodeRecord) bool { return r.ID == id }); i >= 0 {
		return list[i], true
	}
	return control.NodeRecord{}, false
}

func (f planeFacts) Seeds() []string { return control.Spread(f.seeds, f.nodeID) }

// SerfPeers are every active node's gossip address on the overlay
// (NodeRecord.GossipPeer), the control nodes' first: a control node
// rejoins anyone on record.
func (f planeFacts) SerfPeers() []string {
	var controls, others []string
	for _, n := range f.p.Records() {
		if g := n.GossipPeer(); n.ID != f.nodeID && g != "" && n.Active() && !n.OutOfPool { // out of the pool: no gossip to join
			if n.RoleOf() == pki.RoleControl {
				controls = append(controls, g)
			} else {
				others = append(others, g)
			}
		}
	}
	return append(controls, others...) // the control nodes first: rejoin probes them on every pass
}

func (f planeFacts) Revocations() control.Revocations { return f.p.Revocations() }

func (f planeFacts) Refresh(ctx context.Context, told bool) (bool, error) {
	if !told {
		return false, nil
	}
	return false, f.p.SyncRead(ctx)
}

func (f planeFacts) GossipKeys(context.Context, bool) (control.GossipKeys, bool) {
	cl, ok := f.p.Raft().FSM().Cluster()
	if !ok || len(cl.GossipKeys) == 0 {
		return control.GossipKeys{}, false
	}
	return control.GossipKeys{Keys: cl.GossipKeys, Rotated: cl.GossipKeysRotated}, true
}

func (f planeFacts) CABundle(context.Context, bool) (control.CABundle, bool) { return f.p.CABundle() }

func (f planeFacts) OwnNebulaCert(context.Context, bool) ([]byte, error) {
	return f.p.OwnNebulaCert(), nil
}

func (f planeFacts) OwnTLSCert(context.Context) ([]byte, error) { return f.p.OwnTLSCert(), nil }

func (f planeFacts) Settle(ctx context.Context) error { return f.p.SyncRead(ctx) }

func (f planeFacts) NodeRows(ctx context.Context) ([]apitype.Node, error) { return f.p.Nodes(ctx) }

// watched is what a worker's watch stream (fetched.Copies.Follow) calls
// after it applied a change: the overlay loop reconciles now, and the
// follow loop installs a new gossip keyring or CA bundle at once.
// A change of other members' records and revocations alone does not
// wake the follow loop: none of its steps reads them (the node list's
// refresh does nothing while the stream is healthy, which it is when a
// change arrived), and running its four steps, each under a timer and
// parsing this node's certificates, for every membership change was
// work the change did not need (issue 54 item 2).
func (nd *node) watched(sections []string) {
	nd.recordsChanged() // liveness.go
	nd.poke()
	var own func() (control.NodeRecord, bool) // this node's record: a worker's copies hold it
	if nd.copies != nil {
		own = func() (control.NodeRecord, bool) { return nd.copies.Record(nd.facts.NodeID) }
	}
	if nd.followReads(sections, own) {
		nd.wakeFollow(told{keys: slices.Contains(sections, control.SectionKeys), ca: slices.Contains(sections, control.SectionCA)})
	}
}

// followReads reports whether a change of sections may change what the
// follow loop's steps read: any section but the node records and the
// revocations, or this node's own record (its routes decide whether its
// Nebula certificate is to be reissued: routesReissued), compared with
// the one the last call saw (own looks it up; nil: unknown, so it may
// have): one lookup.
func (nd *node) followReads(sections []string, own func() (control.NodeRecord, bool)) bool {
	if len(sections) == 0 {
		return true // no change, a wake-up: a removed node's ask is due (fetched.Copies.Follow)
	}
	for _, s := range sections {
		if s != control.SectionNodes && s != control.SectionRevoked {
			return true
		}
	}
	if own == nil {
		return true
	}
	rec, ok := own()
	nd.followMu.Lock()
	defer nd.followMu.Unlock()
	same := nd.ownSeen.ok && ok && reflect.DeepEqual(nd.ownSeen.rec, rec)
	nd.ownSeen.rec, nd.ownSeen.ok = rec, ok
	return !same
}
