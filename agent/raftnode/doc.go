// Package raftnode is a control node's raft: the bolt log and stable store,
// file snapshots, the mutual-TLS stream layer, and the queries the rest of
// the agent asks of raft (leadership, suffrage, indexes, membership changes,
// apply, read waits). It is the only package besides agent/state that
// imports github.com/hashicorp/raft; everything else sees raft through Node.
// raft's own log lines go to Options.Log, the agent's slog logger, through
// an hclog.Logger written over slog (hclog.go), with lib=raft.
//
// Import rule (deps_test.go): may import agent/state and codes; nothing else
// of meshd.
package raftnode
