// Package statedir is what meshd keeps on disk under its state dir
// (default /var/lib/meshd, 0700) outside raft and the identity files:
// the layout (node.json, identity/, ca/, raft/, serf/, nodes.json), the
// node's facts in node.json (its presence means "member"), the state
// dir's lock (meshd.pid, one meshd per state dir), the clone check (a
// hash of /etc/machine-id recorded at init and join), the guard that
// never wipes the cluster's only CA keys, and the keys of a join whose
// outcome is not known yet (pending-join.json). Every file holding a
// secret is written 0600, atomically, and refused when group- or
// world-readable; a write that finds the disk full says so
// (codes.DiskFull).
//
// Import rule (deps_test.go): may import codes, enroll and pki; nothing else
// of meshd. Only agent imports it.
package statedir
