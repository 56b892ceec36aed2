// Package state is meshd's raft FSM: the authoritative cluster state held by
// the control nodes (cluster facts, nodes, join-token records, overlay IP
// allocations, revocations and a bounded audit ring), the commands that
// change it, their deterministic application, and the versioned snapshot
// codec.
//
// Commands are encoded as one type byte followed by JSON. Apply never reads
// the clock or draws randomness: every time it stores comes from the
// command, so every replica reaches the same state.
//
// Import rule (deps_test.go): may import codes, enroll and pki; nothing else
// of meshd. Of the libraries it uses hashicorp/raft.
package state
