// Package apitype holds the local API's JSON wire types, shared by meshd's
// local API server and meshctl.
//
// Import rule: codes only. meshctl links this package, so it must never
// import raft, serf, memberlist or nebula.
package apitype
