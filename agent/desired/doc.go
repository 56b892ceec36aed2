// Package desired computes, as a pure function, the overlay a node should
// run: from the active node records (raft's FSM on control nodes, the node
// list fetched over mTLS on workers), gossip's liveness, and the
// revocation list, to the lighthouse list, the static host map and the
// blocklist that go into this node's Nebula config. A Tracker keeps the
// same overlay per change (incremental.go): the records that changed
// since the last inputs, as the mesh.Change they make.
//
// Raft decides, gossip reports liveness only: role, overlay IP, underlay
// and the lighthouse set come from records. A gossip member contributes
// its status (alive, failed, left) only when its id, name, role and
// overlay tags match an active record; any other member contributes
// nothing and is listed by Unmatched. The join response's lighthouses
// stand in only until a worker's first node list arrives.
//
// Import rule (deps_test.go): may import gossip, mesh and pki; nothing else
// of meshd.
package desired
