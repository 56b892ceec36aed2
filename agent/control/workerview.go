package control

import (
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// What a caller of the internal API may read of the node records
// (issue 52 item 7). A control node holds raft's records itself, so it
// reads them whole. A worker learns of another node what its watch
// stream carries (watchRecord, recordOf: what it decides with), so the
// node list it reads (GET /v1/nodes, for `meshctl nodes` and for a
// worker following a cluster of the previous release) carries no more
// of the record: not the node's groups, the address its join came from
// (seen_from, behind_nat), a worker's TLS leaf, whether it is ephemeral,
// its certificate expiry, version, join failure cause or revocation
// progress. What the answering control node sees of the node's liveness
// (gossip status, last seen, raft role, the members that cannot reach
// it) is no record field and stays. Its own record a worker reads whole.

// readsWholeRecords reports whether a caller of role reads every node
// record whole: only a control node. Anyone else (a worker; a role a
// later release adds) reads the watch projection of the records not its
// own: fail closed.
func readsWholeRecords(role pki.Role) bool { return role == pki.RoleControl }

// recordFor is row, the node n's row as this control node serves it,
// as caller c may read it.
func recordFor(c Caller, n state.Node, row NodeRecord) NodeRecord {
	if readsWholeRecords(c.Role) || n.ID == c.NodeID {
		return row
	}
	return watchView(n, row)
}

// watchView is what a worker may read of another node n, whose whole row
// is row: its record as the watch stream carries it (the single source
// of what a worker holds of a record: a field the watch leaves out is
// left out here), with two kinds of additions. A departed or joining
// node's name and role, which the watch leaves out only to save bytes
// (the node was listed by name while active, and a row without one says
// nothing), instead of the role the watch's decoding assumes for a record
// without one, and when a former node departed. And what the answering control node sees of the node's
// liveness, which is no record field: its gossip status and when gossip
// last saw it (the worker's own gossip shows both as well), its raft
// role, and the members that report they cannot reach it.
func watchView(n state.Node, row NodeRecord) NodeRecord {
	v := recordOf(n).nodeRecord(n.ID)
	if n.State != state.NodeActive {
		v.Name, v.Role = n.Name, string(n.Role)
	}
	// When a former node departed, so that a worker's `meshctl nodes`
	// hides it after the retention as a control node's does.
	v.Departed = row.Departed
	v.Gossip, v.LastSeen, v.Raft, v.UnreachableFrom = row.Gossip, row.LastSeen, row.Raft, row.UnreachableFrom
	return v
}
