// Package localclient is meshctl's client for meshd's local API: HTTP over
// a unix socket.
//
// Import rule (deps_test.go): may import agent/apitype and codes; nothing
// else of meshd. meshctl links this package: no raft, serf, memberlist or
// nebula.
package localclient
