// Package fetched is a worker's side of "where cluster facts come from":
// a worker has no raft, so it holds copies of what the control nodes
// hold: the node list, the revocation list, the gossip keyring and the CA
// trust bundles follow one watch stream over mTLS from the internal API
// (watch.go: the whole table on first contact, then only what changed),
// with a strict one-shot change as the safety net while no stream is
// healthy; its own renewed certificates are fetched when due, each fetch
// bounded and spread over the control nodes. A control node reads the same facts from its FSM; the agent
// chooses one of the two once, when a node's runtime starts.
//
// Import rule (deps_test.go): may import agent/apitype, agent/control,
// agent/statedir, agent/watch, codes and pki; nothing else of meshd.
// Only agent/member imports it.
package fetched
