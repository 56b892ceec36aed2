// Package apitype holds the local API's JSON wire types, shared by meshd's
// local API server and meshctl.
//
// Import rule (deps_test.go): may import codes; nothing else of meshd.
// meshctl links this package, so it must never import raft, serf, memberlist
// or nebula.
package apitype
