// Package watch is how changes reach workers (issue 32): a control node
// keeps a Table of the facts a worker copies from raft (node records,
// revocations, the gossip keyring, the CA bundles), each item stamped
// with the raft index of the state that first held it as it is, and a
// worker keeps a Copy at the index it last applied and asks for what
// changed since: a Change, only the items stamped after that index, or
// the whole table when the worker is new or fell behind what the table
// still remembers (a deletion it no longer holds a tombstone for).
//
// The package knows nothing of raft, HTTP or the records' meaning: items
// are keyed bytes in named sections, compared by their bytes. The
// control plane fills the Table from its FSM and serves Changes
// (agent/control/watch.go); a worker's follower applies them
// (agent/fetched/watch.go).
//
// Import rule (deps_test.go): may import no meshd package.
package watch
