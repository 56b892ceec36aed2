// Package fetched is a worker's side of "where cluster facts come from":
// a worker has no raft, so it holds copies of what the control nodes
// hold, fetched over mTLS from the internal API (the node list, the
// revocation list, the gossip keyring, the CA trust bundles, its own
// renewed certificates), each fetch bounded and spread over the control
// nodes. A control node reads the same facts from its FSM; the agent
// chooses one of the two once, when a node's runtime starts.
//
// Import rule (deps_test.go): may import agent/apitype, agent/control,
// agent/statedir, codes and pki; nothing else of meshd. Only agent
// imports it.
package fetched
