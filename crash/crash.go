// Package crash holds the crash points of the fault tests (issue 12): a
// named place in a flow where a test build kills its own process with
// SIGKILL when MESHD_CRASH_AT names it. Only a build with the tag
// `crashpoints` has them; in every other build At does nothing and the
// variable's name is not in the binary (TestReleaseHasNoCrashPoints).
package crash

// Points lists every crash point, in the order a join meets them. The e2e
// suite kills at each in turn; a point missing here is never exercised.
var Points = []string{
	JoinAfterToken, JoinAfterIdentityCheck, JoinAfterUnderlay, JoinAfterKeys, JoinAfterEnroll,
	JoinAfterIdentitySaved, JoinAfterNodeFile, JoinAfterStart, JoinAfterRaftJoin, JoinAfterConfirm,
	EnrollAfterLookup, EnrollAfterAdmit, EnrollAfterSign, EnrollAfterRecord, SignerBeforeSign, SignerAfterSign,
}

// The joiner's points (agent/join.go, between its numbered steps).
const (
	JoinAfterToken         = "join/after-token"          // 1 done: token parsed and checked
	JoinAfterIdentityCheck = "join/after-identity-check" // 2 done
	JoinAfterUnderlay      = "join/after-underlay"       // 3 done
	JoinAfterKeys          = "join/after-keys"           // 4 done: pending-join.json written
	JoinAfterEnroll        = "join/after-enroll"         // 5-8 done: certificates received, nothing saved
	JoinAfterIdentitySaved = "join/after-identity-saved" // 9 half: identity written, node.json not
	JoinAfterNodeFile      = "join/after-node-json"      // 9 done: node.json written, pending keys not settled
	JoinAfterStart         = "join/after-start"          // 9 done, runtime running, 10 not begun
	JoinAfterRaftJoin      = "join/after-raft-join"      // 10 half: a control node is a voter, not confirmed
	JoinAfterConfirm       = "join/after-confirm"        // 10 half: ConfirmJoin committed, not seen active
)

// The serving control node's points (enroll/server.go).
const (
	EnrollAfterLookup = "enroll/after-lookup" // token looked up and admissible, nothing written
	EnrollAfterAdmit  = "enroll/after-admit"  // Admit committed (token consumed, node joining)
	EnrollAfterSign   = "enroll/after-sign"   // both certificates signed, not recorded
	EnrollAfterRecord = "enroll/after-record" // RecordCerts committed, answer not sent
)

// The CA holder's signer (agent/control/signer.go).
const (
	SignerBeforeSign = "signer/before-sign" // admission checked, nothing signed
	SignerAfterSign  = "signer/after-sign"  // signed, answer not sent
)

// CustodyPoints are the crash points of a CA custody move (issue 13),
// apart from Points: the join crash test walks Points.
var CustodyPoints = []string{CustodyAfterReceive, HandoffAfterProbe, HandoffAfterRecord}

// The points of `meshctl ca handoff` (agent/control/custody.go).
const (
	CustodyAfterReceive = "custody/after-receive" // target: CA keys written, not loaded, no probe answered
	HandoffAfterProbe   = "custody/after-probe"   // holder: the target's probe verified, the move not recorded
	HandoffAfterRecord  = "custody/after-record"  // holder: the record names the target, its own copy not released
)
