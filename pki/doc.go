// Package pki owns meshd's certificates and key files: the cluster CA
// (X.509) and the Nebula CA, role-bearing TLS leaves, Nebula host
// certificates signed from a public key (with the routes a node carries as
// unsafe networks, routes.go), SHA-256 fingerprints, the pinned
// and role-checked verification of peers, and key files written atomically
// and refused when group- or world-accessible.
//
// Import rule (deps_test.go): may import codes and trust; nothing else of meshd. It
// also uses the Nebula cert package.
package pki
