// Package desired computes, as a pure function, the overlay a node should
// run: from the node records raft holds (on control nodes), the
// lighthouses the join response named, gossip's members and their
// liveness, and the revocation list, to the lighthouse list, the static
// host map and the blocklist that go into this node's Nebula config.
//
// Imports: mesh, gossip, pki.
package desired
