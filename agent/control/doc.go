// Package control is a control node's control plane and the internal API
// every member speaks to it.
//
// A Plane exists only on control nodes (workers hold none): it owns raft
// (through agent/raftnode), the writes that go to the leader or are
// forwarded one hop to it, the read index, the promotion of joining control
// nodes, the enroll ledger and the signers (the CA itself on the CA holder,
// a forwarder to it elsewhere), token minting, revocation and pruning,
// removal, the audit trail's reads and actors (audit.go, actor.go: who an
// event names, and why no caller can choose it), and the internal API's
// server side. routes.go is the one table
// of the internal API's doors: every path, the roles allowed through it
// and its handler, all behind one guard.
//
// Client is the internal API's client side, used by every member (a worker
// fetching the node list, revocations or its renewed Nebula cert; a
// follower forwarding a write).
//
// Import rule (deps_test.go): may import agent/apitype, agent/raftnode,
// agent/state, agent/watch, codes, crash, enroll and pki; nothing else of
// meshd.
package control
