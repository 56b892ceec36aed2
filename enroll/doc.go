// Package enroll owns joining: the join token format and checksum, the
// admission checks a control node makes against its ledger, the enroll
// HTTP server, and the joiner's pinned-TLS client.
//
// Import rule (deps_test.go): may import codes, crash and trust; nothing else
// of meshd. The agent implements the Ledger and Signer interfaces defined
// here (over raft and the CA holder). It links no Nebula (trust, not pki),
// so meshctl can use its token and pinned-TLS client (`meshctl
// nebula-bundle`).
package enroll
