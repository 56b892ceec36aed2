// Package localclient is meshctl's client for meshd's local API: HTTP over
// a unix socket.
//
// Import rule: agent/apitype and codes only (no raft, serf, memberlist or
// nebula: meshctl links this).
package localclient
