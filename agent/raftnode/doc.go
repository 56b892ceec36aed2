// Package raftnode is a control node's raft: the bolt log and stable store,
// file snapshots, the mutual-TLS stream layer, and the queries the rest of
// the agent asks of raft (leadership, suffrage, indexes, membership changes,
// apply, read waits). It is the only package besides agent/state that
// imports github.com/hashicorp/raft; everything else sees raft through Node.
//
// Imports: agent/state, codes.
package raftnode
