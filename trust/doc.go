// Package trust is what a machine needs to trust a cluster before it
// holds any of its certificates, and what a TLS leaf says about the node
// it names: the full SHA-256 fingerprint a join token pins, pinned
// verification of a seed's chain, the role and node id a leaf carries,
// the key a CSR may certify, PEM certificate bundles, node groups.
//
// It is the X.509 half of pki that links no Nebula: enroll builds on it,
// so meshctl, which links no Nebula (deps_test.go's forbiddenInMeshctl),
// can talk to a seed itself over the same pinned TLS as a join (`meshctl
// nebula-bundle`, issue 35). pki re-exports every name (pki/trust.go), so
// the rest of the project says pki.Fingerprint, pki.RoleControl as before.
//
// Import rule (deps_test.go): may import codes; nothing else of meshd.
package trust
