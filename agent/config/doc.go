// Package config is meshd.yaml: the File type with its defaults, the
// checker that lists every problem of a file at once (line, key path,
// value, what is allowed, "did you mean"), the reloadable subset and the
// diff a reload reports, the loggers the config describes (text or JSON,
// a level a reload can change, journald priorities), and the one mapping
// of the file onto the configs of the parts: Nebula (MeshBase and the
// overlay Policy a reload replaces), raft, the enroll server, port 7300's
// limits and the control plane.
//
// It knows nothing of a running node: what a node's facts add (its name,
// role, addresses, keys) is passed in by the agent, which also owns the
// gossip config (it carries the agent's gossip tags) and applies a reload.
//
// Import rule (deps_test.go): may import agent/control, agent/raftnode,
// codes, enroll, idtoken, mesh, names and pki; nothing else of meshd. agent, agent/agenttest
// and cmd/meshd import it.
package config
