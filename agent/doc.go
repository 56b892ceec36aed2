// Package agent is the meshd daemon: its lifecycle, the local API over a
// unix socket, raft over a mutual-TLS stream layer, the control listener
// (enroll and internal API), and the flows behind init, admit and join.
//
// Import rule: agent may import agent/state, agent/apitype, enroll, gossip,
// mesh, pki and codes. Nothing in meshd imports agent except cmd/meshd and
// agent/agenttest.
package agent
