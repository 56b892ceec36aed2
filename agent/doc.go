// Package agent is the meshd daemon: its lifecycle, the local API over a
// unix socket, raft over a mutual-TLS stream layer, the control listener
// (enroll and internal API), and the flows behind init, admit and join.
//
// Import rule (deps_test.go): may import agent/apitype, agent/config,
// agent/control, agent/localapi, agent/member, agent/metrics,
// agent/preflight, agent/state, agent/statedir, codes, crash, enroll, mesh
// and pki; nothing else of meshd. Nothing in meshd imports agent except
// cmd/meshd and agent/agenttest.
package agent
