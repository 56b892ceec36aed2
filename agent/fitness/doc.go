// Package fitness judges whether this node is fit to serve others: its
// state dir takes a write (a check that writes and syncs, not only errors
// read back from raft), and, on a control node, its clock agrees with the
// other control nodes' clocks. A control node that is not fit answers
// joins codes.SeedUnfit (the joiner moves on to the next seed), mints no
// token while its clock is untrusted, hands raft leadership to a fit
// voter, and says why in `meshctl status` and its metrics (issue 28).
//
// The member runtime runs the checks and wires the verdicts into the
// enroll server, the control plane, status and metrics.
//
// Import rule (deps_test.go): may import codes; nothing else of meshd.
package fitness
