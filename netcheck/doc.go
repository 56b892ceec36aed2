// Package netcheck is the path check of a node behind networks nobody
// controls (issue 29 item 5): a STUN responder that control nodes serve on
// ports.stun (UDP, default 3478), and the client side, Check, that `meshctl
// netcheck`, `meshctl join --plan` and `meshctl join` run. From one local
// UDP socket Check sends a STUN Binding request to each control node and
// reports, per node, whether it answered and the address it saw (the NAT's
// mapping); then the verdict: UDP works or is blocked, the mapping
// (port-preserving, endpoint-independent, symmetric or unknown), whether
// a direct path between nodes behind NATs is possible, and which relay
// (every control node is a Nebula relay) would carry the traffic
// otherwise. With no UDP answer at all it asks each control node's TCP
// control port (Options.ProbeTCP) and reads the silence as UDP blocked
// only from one that says it serves STUN on the port asked; a release
// without the responder says nothing, and the check is Unchecked, not
// failed.
//
// The STUN wire format is github.com/pion/stun's; nothing here encodes or
// decodes a STUN message by hand. The responder answers Binding requests
// only, with the requester's own address (XOR-MAPPED-ADDRESS): it tells a
// sender nothing it does not already send from. It is bounded: a
// per-source rate limit, a bounded table of sources, and packets that do
// not parse are counted and dropped, never logged with their content.
//
// Import rule (deps_test.go): may import codes and persource; nothing else of meshd.
// agent/member (the responder on control nodes, `meshctl netcheck`) and
// agent/preflight (the join's check) import it.
package netcheck
