package state

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// fullStep is one command of fullHistory and the outcome it must have:
// success, a coded failure, or the bare enroll.ErrIPTaken.
type fullStep struct {
	cmd     Command
	want    codes.Code
	ipTaken bool
}

// fullHistory is every command type (Tracked ones too, with each kind of
// remembered result), a Nebula renewal, a token revoked and a prune, chosen so that every field of
// every record of the snapshot is non-zero somewhere; the tests below
// check both. The first frozenFullSteps steps wrote
// testdata/snapshot-v1-full.bin: append new steps, never edit those.
func fullHistory(t testing.TB) []fullStep {
	t.Helper()
	bound := tokenRecord(3, "w3", pki.RoleWorker)
	bound.Addr = "192.0.2.7"
	// stale expired long before t0: the prune step removes it, and only it.
	stale := tokenRecord(7, "w7", pki.RoleWorker)
	stale.Created, stale.Expires = t0.Add(-time.Hour), t0.Add(-45*time.Minute)
	// w6 carries the fields issue 9 added (after the frozen steps).
	w6 := admitCmd(6, "n-w6", "w6", pki.RoleWorker, "10.42.0.6")
	w6.Node.TLSPublicKey, w6.Node.PrevTLSFingerprint = []byte("w6-tls-key"), "w6-prev-tls-fp"
	w6.Node.Retired = []string{"w6-retired-fp"}

	c1 := admitCmd(2, "n-c1", "c1", pki.RoleControl, "10.42.0.3")
	c1.Node.EnrollAddr, c1.Node.RaftAddr = "198.51.100.9:7300", "198.51.100.9:7301"
	c1.Node.TLSCert, c1.Node.NebulaCert = []byte("c1-tls-pem"), []byte("c1-nebula-pem")
	c1.Node.NebulaIssued = c1.Admission.At

	fullJWTJoin := identityJoinCmd(t, testIdentity("full-52"), "j52")
	fullJWTJoin.Admission.At = t0.Add(23 * time.Minute)

	fleetKey := keyRecord(60, 2, "fleet-")
	fleetKey.Key.NameFromHost, fleetKey.Ephemeral = true, true

	track := func(id string, c Command) Tracked {
		tr, err := Track(id, c)
		if err != nil {
			t.Fatalf("Track(%s): %v", id, err)
		}
		return tr
	}
	return []fullStep{
		{cmd: bootstrapCmd()},
		{cmd: MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: MintToken{Record: tokenRecord(2, "c1", pki.RoleControl), Actor: "uid:0"}},
		{cmd: MintToken{Record: bound, Actor: "uid:0"}},
		{cmd: admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2")},
		{cmd: c1},
		{cmd: SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0.Add(2 * time.Minute), Actor: "uid:0"}},
		{cmd: RenewNebula{NodeID: originID, Cert: []byte("origin-nebula-renewed"), Fingerprint: "bb02",
			Issued: t0.Add(3 * time.Minute), Expires: t0.Add(400 * 24 * time.Hour), At: t0.Add(3 * time.Minute), Actor: originID}},
		{cmd: track("req-mint", MintToken{Record: tokenRecord(4, "w4", pki.RoleWorker), Actor: "uid:0"})},
		{cmd: track("req-unknown", SetNodeState{NodeID: "nobody", State: NodeLeft, At: t0}), want: codes.NodeUnknown},
		{cmd: track("req-taken", admitCmd(4, "n-w4", "w4", pki.RoleWorker, "10.42.0.3")), ipTaken: true},
		{cmd: track("req-admit", admitCmd(4, "n-w4", "w4", pki.RoleWorker, "10.42.0.4"))},
		{cmd: SetNodeState{NodeID: "n-c1", State: NodeLeft, At: t0.Add(4 * time.Minute), Actor: "uid:0"}},
		// Token management: revoke, refusals, prune (after the frozen steps).
		{cmd: MintToken{Record: tokenRecord(5, "w5", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: RevokeToken{Hash: secret(5).Hash(), At: t0.Add(5 * time.Minute), Actor: "uid:0"}},
		{cmd: admitCmd(5, "n-w5", "w5", pki.RoleWorker, "10.42.0.5"), want: codes.TokenRevoked},
		{cmd: track("req-revoke-used", RevokeToken{Hash: secret(1).Hash(), At: t0.Add(5 * time.Minute), Actor: "uid:0"}),
			want: codes.TokenConsumed},
		{cmd: MintToken{Record: stale, Actor: "uid:0"}},
		{cmd: PruneTokens{Before: t0, At: t0}, want: codes.BadRequest},
		{cmd: PruneTokens{Before: t0, At: t0.Add(24 * time.Hour), Actor: originID}},
		{cmd: MintToken{Record: tokenRecord(6, "w6", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: w6},
		// Two-phase admission: joining, then certified; another undone.
		{cmd: MintToken{Record: tokenRecord(8, "w8", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: joinCmd(8, "n-w8", "w8", pki.RoleWorker)},
		{cmd: AbortAdmission{NodeID: originID, At: t0.Add(2 * time.Minute), Actor: originID}, want: codes.BadRequest},
		{cmd: certsCmd("n-w8")},
		{cmd: certsCmd("n-w8"), want: codes.BadRequest},
		{cmd: MintToken{Record: tokenRecord(10, "w10", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: joinCmd(10, "n-w10", "w10", pki.RoleWorker)},
		{cmd: track("req-abort", AbortAdmission{NodeID: "n-w10", At: t0.Add(2 * time.Minute), Actor: originID})},
		// Gossip key rotation (after the frozen steps).
		{cmd: SetGossipKeys{Keys: [][]byte{testCluster().GossipKeys[0], bytes.Repeat([]byte{9}, GossipKeySize)},
			Step: KeyInstall, Expect: KeyringID(testCluster().GossipKeys), At: t0.Add(6 * time.Minute), Actor: "uid:0"}},
		{cmd: SetGossipKeys{Keys: [][]byte{bytes.Repeat([]byte{9}, GossipKeySize), testCluster().GossipKeys[0]},
			Step: KeyUse, Expect: KeyringID([][]byte{testCluster().GossipKeys[0], bytes.Repeat([]byte{9}, GossipKeySize)}),
			At: t0.Add(6 * time.Minute), Actor: "uid:0"}},
		{cmd: SetGossipKeys{Keys: [][]byte{bytes.Repeat([]byte{9}, GossipKeySize)}, Step: KeyDrop,
			Expect: KeyringID([][]byte{bytes.Repeat([]byte{9}, GossipKeySize), testCluster().GossipKeys[0]}),
			At:     t0.Add(6 * time.Minute), Actor: "uid:0"}},
		// TLS renewal (issue 9): w4's leaf twice, so one is retired; a
		// removed node's leaf is never renewed.
		{cmd: renewTLSCmd("n-w4", "w4-tls-2", t0.Add(48*time.Hour))},
		{cmd: renewTLSCmd("n-w4", "w4-tls-3", t0.Add(72*time.Hour))},
		{cmd: renewTLSCmd("n-w1", "w1-tls-2", t0.Add(48*time.Hour)), want: codes.BadRequest},
		// A removal's acknowledgement round (issue 9).
		{cmd: RecordRevocationAcks{Ack: RevocationAck{NodeID: "n-w1", Version: 2, Acked: []string{"origin", "w4"},
			Pending: []string{"w6"}, At: t0.Add(6 * time.Minute)}, Actor: originID}},
		// Issue 9: removal revokes every certificate w6 held; the CA
		// holder is never removed.
		{cmd: SetNodeState{NodeID: "n-w6", State: NodeRemoved, At: t0.Add(6 * time.Minute), Actor: "node:n-origin"}},
		{cmd: SetNodeState{NodeID: originID, State: NodeRemoved, At: t0.Add(6 * time.Minute)}, want: codes.CAHolderStays},
		// Issue 11: joining until confirmed; a join that never confirms
		// fails with its cause; a former node's record reused.
		{cmd: MintToken{Record: tokenRecord(11, "w11", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: joinCmd(11, "n-w11", "w11", pki.RoleWorker)},
		{cmd: ConfirmJoin{NodeID: "n-w11", At: t0.Add(2 * time.Minute)}, want: codes.BadRequest},
		{cmd: joiningCertsCmd("n-w11")},
		{cmd: ConfirmJoin{NodeID: "n-w11", At: t0.Add(3 * time.Minute), Actor: "node:n-w11"}},
		{cmd: MintToken{Record: tokenRecord(12, "w12", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: joinCmd(12, "n-w12", "w12", pki.RoleWorker)},
		{cmd: joiningCertsCmd("n-w12")},
		{cmd: FailJoin{NodeID: "n-w12", Cause: "the joiner did not confirm", At: t0.Add(4 * time.Minute), Actor: "node:n-origin"}},
		{cmd: ConfirmJoin{NodeID: "n-w12", At: t0.Add(4 * time.Minute)}, want: codes.JoinUnconfirmed},
		{cmd: MintToken{Record: tokenRecord(13, "w6", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: joinCmd(13, "n-w6", "w6", pki.RoleWorker)},
		// Issue 13: approval of a join (admit --approve): w14 approved after
		// a wrong code, w15 burnt by five, w16 still waiting.
		{cmd: MintToken{Record: approveRecord(14, "w14"), Actor: "uid:0"}},
		{cmd: requestApprovalCmd(14, "a")},
		{cmd: joinCmd(14, "n-w14", "w14", pki.RoleWorker), want: codes.ApprovalNotPending},
		{cmd: approveCmd(14, "b")},
		{cmd: approveCmd(14, "a")},
		{cmd: MintToken{Record: approveRecord(15, "w15"), Actor: "uid:0"}},
		{cmd: requestApprovalCmd(15, "a")},
		{cmd: approveCmd(15, "b")}, {cmd: approveCmd(15, "c")}, {cmd: approveCmd(15, "d")}, {cmd: approveCmd(15, "e")},
		{cmd: track("req-burn", approveCmd(15, "f"))},
		{cmd: approveCmd(15, "a"), want: codes.ApprovalBurnt},
		{cmd: MintToken{Record: approveRecord(16, "w16"), Actor: "uid:0"}},
		{cmd: requestApprovalCmd(16, "a")},
		// Issue 13: CA custody moves to another active control node; a
		// sealed backup is recorded by the holder on record only.
		{cmd: MintToken{Record: tokenRecord(17, "c17", pki.RoleControl), Actor: "uid:0"}},
		{cmd: joinCmd(17, "n-c17", "c17", pki.RoleControl)},
		{cmd: SetCAHolder{From: originID, To: "n-c17", CAFingerprint: testCluster().CAFingerprint, At: t0.Add(7 * time.Minute)},
			want: codes.CustodyTarget},
		{cmd: joiningCertsCmd("n-c17")},
		{cmd: ConfirmJoin{NodeID: "n-c17", At: t0.Add(7 * time.Minute), Actor: "node:n-c17"}},
		{cmd: track("req-custody", SetCAHolder{From: originID, To: "n-c17", CAFingerprint: testCluster().CAFingerprint,
			At: t0.Add(8 * time.Minute), Actor: "uid=0@ctl-0"})},
		{cmd: RecordCABackup{NodeID: originID, At: t0.Add(9 * time.Minute)}, want: codes.NotCAHolder},
		{cmd: RecordCABackup{NodeID: "n-c17", At: t0.Add(9 * time.Minute), Actor: "uid=0@c17"}},
		// Issue 13: a CA rotation through its three steps, and a second
		// one begun (--now), so the final state has both a rotation and
		// the time of the last one.
		{cmd: rotateBegin(t, next1, false)},
		{cmd: rotateBegin(t, next2, false), want: codes.BadRequest},
		{cmd: RotateCA{Step: CAFinish, Next: next1.Fingerprint().String(), At: t0.Add(7 * time.Minute)}, want: codes.BadRequest},
		{cmd: RotateCA{Step: CAReissue, Next: next2.Fingerprint().String(), At: t0.Add(7 * time.Minute)}, want: codes.BadRequest},
		{cmd: RotateCA{Step: CAReissue, Next: next1.Fingerprint().String(), At: t0.Add(7 * time.Minute), Actor: "uid:0"}},
		{cmd: RotateCA{Step: CAFinish, Next: next1.Fingerprint().String(), At: t0.Add(8 * time.Minute), Actor: "node:n-c17"}},
		{cmd: rotateBegin(t, next2, true)},
		// Issue 14: node groups carried by a token into the node's record;
		// a role name as a node group is refused.
		{cmd: MintToken{Record: groupRecord(18, "w18", "control"), Actor: "uid:0"}, want: codes.BadGroup},
		{cmd: MintToken{Record: groupRecord(18, "w18", "db", "eu-west"), Actor: "uid:0"}},
		{cmd: admitCmd(18, "n-w18", "w18", pki.RoleWorker, "10.42.0.18")},
		// Issue 27: removed w6 and failed w12 left with the gossip key: a
		// rotation's install takes them on (KeysPaying); w18 leaves after
		// it, and is owed to the next one.
		{cmd: SetGossipKeys{Keys: [][]byte{bytes.Repeat([]byte{9}, GossipKeySize), bytes.Repeat([]byte{10}, GossipKeySize)},
			Step: KeyInstall, Expect: KeyringID([][]byte{bytes.Repeat([]byte{9}, GossipKeySize)}), At: t0.Add(10 * time.Minute),
			Actor: "node:n-c17"}},
		{cmd: SetNodeState{NodeID: "n-w18", State: NodeLeft, At: t0.Add(10 * time.Minute), Actor: "node:n-w18"}},
		// Issue 27: a token names its seeds by node id.
		{cmd: MintToken{Record: seededRecord(19, "w19", "n-c17"), Actor: "uid:0"}},
		// Issue 29: a member records its own relay offer; a former one
		// cannot.
		{cmd: SetRelay{NodeID: "n-c17", Relay: true, At: t0.Add(11 * time.Minute), Actor: "node:n-c17"}},
		{cmd: SetRelay{NodeID: "n-w18", Relay: true, At: t0.Add(11 * time.Minute)}, want: codes.BadRequest},
		{cmd: SetRelay{NodeID: "n-nobody", Relay: true, At: t0.Add(11 * time.Minute)}, want: codes.NodeUnknown},
		// Issue 31: an ephemeral worker, removed, is forgotten (only once
		// it is former: issue 52 lets an operator forget any); w21, admitted after, takes
		// its freed overlay IP and stays ephemeral.
		{cmd: MintToken{Record: tokenRecord(20, "w20", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: ephemeralJoin(20, "n-w20", "w20")},
		{cmd: joiningCertsCmd("n-w20")},
		{cmd: ConfirmJoin{NodeID: "n-w20", At: t0.Add(12 * time.Minute), Actor: "node:n-w20"}},
		{cmd: ForgetNode{NodeID: "n-w20", At: t0.Add(12 * time.Minute)}, want: codes.BadRequest},
		{cmd: SetNodeState{NodeID: "n-w20", State: NodeRemoved, At: t0.Add(13 * time.Minute), Actor: "node:ctl-0"}},
		{cmd: ForgetNode{NodeID: "n-c17", At: t0.Add(13 * time.Minute)}, want: codes.BadRequest}, // active: remove it first
		{cmd: track("req-forget", ForgetNode{NodeID: "n-w20", At: t0.Add(13 * time.Minute), Actor: "node:ctl-0"})},
		{cmd: ForgetNode{NodeID: "n-w20", At: t0.Add(13 * time.Minute)}, want: codes.NodeUnknown},
		{cmd: MintToken{Record: tokenRecord(21, "w21", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: ephemeralJoin(21, "n-w21", "w21")},
		// Issue 31: a reusable, ephemeral key with --name-from-host gives
		// its first joiner its hostname, its second prefix-1; its third
		// use is refused; an overlapping prefix is refused.
		{cmd: MintToken{Record: fleetKey, Actor: "uid:0"}},
		{cmd: MintToken{Record: keyRecord(61, 5, "fleet-a"), Actor: "uid:0"}, want: codes.KeyPrefixTaken},
		{cmd: keyJoinCmd(60, "m1", "builder")},
		{cmd: keyJoinCmd(60, "m2", "builder")},
		{cmd: keyJoinCmd(60, "m3", ""), want: codes.KeyExhausted},
		// Issue 31: a join by a verified JWT; the same JWT again is a replay.
		{cmd: identityJoinCmd(t, testIdentity("full-1"), "j1")},
		{cmd: identityJoinCmd(t, testIdentity("full-1"), "j2"), want: codes.JWTReplayed},
		// Issue 33: w11 asks for a LAN and the exit route, c17 for the
		// same LAN (failover); both approved, w11 (approved first)
		// carries it; a carrier move on a stale view is refused; w11's
		// LAN approval withdrawn, its next certificate revokes those
		// that held the LAN. Bad requests change nothing.
		{cmd: AdvertiseRoutes{NodeID: "n-w11", Prefixes: []netip.Prefix{lan50, ExitPrefix}, At: t0.Add(14 * time.Minute), Actor: "node:n-w11"}},
		{cmd: AdvertiseRoutes{NodeID: "n-c17", Prefixes: []netip.Prefix{lan50}, At: t0.Add(14 * time.Minute), Actor: "node:n-c17"}},
		{cmd: AdvertiseRoutes{NodeID: originID, Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}, At: t0.Add(14 * time.Minute)}, want: codes.RouteOverlap},
		{cmd: AdvertiseRoutes{NodeID: originID, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.42.7.0/24")}, At: t0.Add(14 * time.Minute)}, want: codes.RouteBad},
		{cmd: AdvertiseRoutes{NodeID: originID, Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, At: t0.Add(14 * time.Minute)}, want: codes.RouteUnderlay},
		{cmd: AdvertiseRoutes{NodeID: "n-w1", Prefixes: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/24")}, At: t0.Add(14 * time.Minute)}, want: codes.RouteBad},
		{cmd: ApproveRoute{NodeID: originID, Prefix: lan50, At: t0.Add(15 * time.Minute)}, want: codes.RouteNotRequested},
		{cmd: ApproveRoute{NodeID: "n-w11", Prefix: lan50, At: t0.Add(15 * time.Minute), Actor: "uid=0@origin"}},
		{cmd: ApproveRoute{NodeID: "n-w11", Prefix: ExitPrefix, At: t0.Add(15 * time.Minute), Actor: "uid=0@origin"}},
		{cmd: ApproveRoute{NodeID: "n-c17", Prefix: lan50, At: t0.Add(16 * time.Minute), Actor: "uid=0@origin"}},
		{cmd: SetCarrier{Prefix: lan50, NodeID: "n-c17", From: "n-w11", Reason: "carrier down", At: t0.Add(17 * time.Minute), Actor: "node:n-c17"}},
		{cmd: SetCarrier{Prefix: lan50, NodeID: "n-w11", From: "n-w11", At: t0.Add(17 * time.Minute)}, want: codes.CarrierChanged},
		{cmd: RenewNebula{NodeID: "n-w11", Cert: []byte("w11-nebula-routes"), Fingerprint: "cc11", Routes: []netip.Prefix{ExitPrefix, lan50},
			Issued: t0.Add(17 * time.Minute), Expires: t0.Add(400 * 24 * time.Hour), At: t0.Add(17 * time.Minute), Actor: "node:n-c17"}},
		{cmd: WithdrawRoute{NodeID: "n-w11", Prefix: lan50, At: t0.Add(18 * time.Minute), Actor: "uid=0@origin"}},
		{cmd: RenewNebula{NodeID: "n-w11", Cert: []byte("w11-nebula-exit"), Fingerprint: "cc12", Routes: []netip.Prefix{ExitPrefix},
			Issued: t0.Add(18 * time.Minute), Expires: t0.Add(401 * 24 * time.Hour), At: t0.Add(18 * time.Minute), Actor: "node:n-c17"}},
		// Issue 35: a stock Nebula member, admitted with a token of its
		// own (a certificate lifetime set), active once its one
		// certificate is recorded; another device with its key is
		// refused; its certificate renewed with a renewal token, which
		// that spends; the same renewal token again is refused.
		{cmd: MintToken{Record: nebulaRecord(70, "phone", false), Actor: "uid:0"}},
		{cmd: nebulaJoinCmd(70, "n-phone", "phone", 7)},
		{cmd: RecordCerts{NodeID: "n-phone", NebulaCert: []byte("nebula-pem-phone"), NebulaFingerprint: "ee-phone",
			NebulaExpires: t0.Add(30 * 24 * time.Hour), At: t0.Add(20 * time.Minute), Actor: originID, Joining: true}},
		{cmd: MintToken{Record: nebulaRecord(71, "tablet", false), Actor: "uid:0"}},
		{cmd: nebulaJoinCmd(71, "n-tablet", "tablet", 7), want: codes.NebulaKeyInUse},
		{cmd: MintToken{Record: nebulaRecord(72, "phone", true), Actor: "uid:0"}},
		{cmd: RenewNebulaMember{Token: secret(72).Hash(), NodeID: "n-phone", Cert: []byte("nebula-pem-phone-2"), Fingerprint: "ee-phone-2",
			Issued: t0.Add(21 * time.Minute), Expires: t0.Add(31 * 24 * time.Hour), At: t0.Add(21 * time.Minute), Actor: originID}},
		{cmd: RenewNebulaMember{Token: secret(72).Hash(), NodeID: "n-phone", Cert: []byte("nebula-pem-phone-3"), Fingerprint: "ee-phone-3",
			Issued: t0.Add(22 * time.Minute), Expires: t0.Add(32 * 24 * time.Hour), At: t0.Add(22 * time.Minute)}, want: codes.TokenConsumed},
		// Issue 52: a joiner undoes its own certified join after it failed
		// on its machine (its certificates revoked, its token unused
		// again); another's leaf, or an active node, is refused.
		{cmd: MintToken{Record: tokenRecord(73, "w73", pki.RoleWorker), Actor: "uid:0"}},
		{cmd: joinCmd(73, "n-w73", "w73", pki.RoleWorker)},
		{cmd: joiningCertsCmd("n-w73")},
		{cmd: AbortJoin{NodeID: "n-w73", Leaf: "aa01", At: t0.Add(23 * time.Minute)}, want: codes.NotMember},
		{cmd: AbortJoin{NodeID: "n-w11", Leaf: "aa-n-w11", At: t0.Add(23 * time.Minute)}, want: codes.JoinConfirmed},
		{cmd: track("req-abort-join", AbortJoin{NodeID: "n-w73", Leaf: "aa-n-w73", Cause: "start overlay: ports.nebula",
			At: t0.Add(23 * time.Minute), Actor: "node:n-w73"})},
		// The same undone by a join by JWT: its replay record stays, free
		// and counted.
		{cmd: fullJWTJoin},
		{cmd: joiningCertsCmd(fullJWTJoin.Admission.NodeID)},
		{cmd: AbortJoin{NodeID: fullJWTJoin.Admission.NodeID, Leaf: "aa-" + fullJWTJoin.Admission.NodeID, At: t0.Add(24 * time.Minute),
			Actor: "node:" + fullJWTJoin.Admission.NodeID}},
		// Issue 52: a control node leaves to join again with a token that
		// names it as a seed, which it keeps; only a control node's leave
		// keeps a token.
		{cmd: MintToken{Record: tokenRecord(74, "c74", pki.RoleControl), Actor: "uid:0"}},
		{cmd: admitCmd(74, "n-c74", "c74", pki.RoleControl, "10.42.0.74")},
		{cmd: MintToken{Record: tokenRecord(75, "c75", pki.RoleControl), Actor: "uid:0"}},
		{cmd: SetNodeState{NodeID: "n-w18", State: NodeRemoved, At: t0.Add(25 * time.Minute), Keep: secret(75).Hash()}, want: codes.BadRequest},
		{cmd: SetNodeState{NodeID: "n-c74", State: NodeLeft, At: t0.Add(25 * time.Minute), Actor: "node:n-c74", Keep: secret(75).Hash()}},
		// Issue 54: the leader's liveness verdict, one batch: w11 and the
		// stock member found silent (a left node and an unknown id
		// skipped), then the stock member heard again.
		{cmd: SetUnheard{Changes: []UnheardChange{{NodeID: "n-w11", At: t0.Add(26 * time.Minute)}, {NodeID: "n-phone", At: t0.Add(26 * time.Minute)},
			{NodeID: "n-c74", At: t0.Add(26 * time.Minute)}, {NodeID: "n-nobody", At: t0.Add(26 * time.Minute)}}, Actor: "node:n-c17"}},
		{cmd: SetUnheard{Changes: []UnheardChange{{NodeID: "n-phone"}}, Actor: "node:n-c17"}},
		// Issue 54: the facts members report by the internal API, one
		// batch: w11's version and signed CA report (a left node and an
		// unknown id skipped).
		{cmd: SetFacts{Changes: []FactChange{{NodeID: "n-w11", Version: "v1.2.3", CA: "b1.t1.n1", CASig: []byte{1, 2, 3},
			NAT: "ei", Pool: PoolOut, Revoked: 4},
			{NodeID: "n-c74", Version: "v9"}, {NodeID: "n-nobody", Version: "v9"}}, Actor: "node:n-c17"}},
	}
}

// nebulaRecord is a stock Nebula member's token (issue 35): a first one
// with a 30-day certificate lifetime, or a renewal token.
func nebulaRecord(seed byte, name string, renew bool) enroll.TokenRecord {
	r := tokenRecord(seed, name, pki.RoleNebula)
	r.Expires = t0.Add(30 * time.Minute)
	r.Renew, r.CertLifetime = renew, 30*24*time.Hour
	return r
}

// nebulaJoinCmd admits a stock Nebula member whose X25519 public key is
// made from keySeed: no TLS key, no underlay, no ports.
func nebulaJoinCmd(seed byte, id, name string, keySeed byte) Admit {
	pub := pem.EncodeToMemory(&pem.Block{Type: "NEBULA X25519 PUBLIC KEY", Bytes: bytes.Repeat([]byte{keySeed}, 32)})
	a := enroll.Admission{Token: secret(seed).Hash(), NodeID: id, Name: name, Role: pki.RoleNebula,
		SourceAddr: "203.0.113.7", NebulaPub: pub, Version: "nebula", At: t0.Add(19 * time.Minute)}
	return Admit{Admission: a, Node: Node{ID: id, Name: name, Role: pki.RoleNebula}, Actor: originID}
}

// lan50 is the LAN behind the routers of fullHistory (issue 33).
var lan50 = netip.MustParsePrefix("192.168.50.0/24")

// ephemeralJoin is joinCmd for an ephemeral worker (issue 31).
func ephemeralJoin(seed byte, id, name string) Admit {
	a := joinCmd(seed, id, name, pki.RoleWorker)
	a.Node.Ephemeral = true
	return a
}

// seededRecord is tokenRecord for a token naming its seeds' node ids.
func seededRecord(seed byte, name string, ids ...string) enroll.TokenRecord {
	r := tokenRecord(seed, name, pki.RoleWorker)
	r.SeedIDs = ids
	return r
}

// groupRecord is tokenRecord for a token minted with --group.
func groupRecord(seed byte, name string, groups ...string) enroll.TokenRecord {
	r := tokenRecord(seed, name, pki.RoleWorker)
	r.Groups = groups
	return r
}

// approveRecord is tokenRecord for a token minted with --approve.
func approveRecord(seed byte, name string) enroll.TokenRecord {
	r := tokenRecord(seed, name, pki.RoleWorker)
	r.Approve = true
	return r
}

// requestApprovalCmd is a session with code code waiting on the token of
// seed, a minute after t0, from the joiner whose TLS key joinCmd gives
// node "w<seed>".
func requestApprovalCmd(seed byte, code string) RequestApproval {
	return RequestApproval{Hash: secret(seed).Hash(), At: t0.Add(time.Minute), Actor: originID,
		Pending: enroll.PendingJoin{Code: enroll.HashCode(secret(seed).Hash(), code), Source: "192.0.2.9", Via: "origin",
			Since: t0.Add(time.Minute), Key: enroll.KeyHash(fmt.Appendf(nil, "tls-key-w%d", seed))}}
}

// approveCmd is an operator's code for the token of seed, two minutes
// after t0.
func approveCmd(seed byte, code string) ApproveJoin {
	return ApproveJoin{Hash: secret(seed).Hash(), Code: enroll.HashCode(secret(seed).Hash(), code),
		At: t0.Add(2 * time.Minute), Actor: "uid=0@origin"}
}

// The next CAs of the rotations in fullHistory.
// Both are dual-stack: the first rotation is the move of the IPv4-only
// cluster to v2 certificates and testOverlay6 (issue 34), the second a
// rotation of the dual-stack cluster it made.
var next1, next2 = mustCA("lab"), mustCA("lab")

// testOverlay6 is the IPv6 overlay the first rotation moves to.
var testOverlay6 = netip.MustParsePrefix("fd5a:1b2c:3d4e::/64")

func mustCA(name string) *pki.CA {
	ca, err := pki.NewDualStackCA(name, netip.MustParsePrefix("10.42.0.0/16"), testOverlay6, t0)
	if err != nil {
		panic(err)
	}
	return ca
}

// rotateBegin is the begin step of a rotation to next, carrying the IPv6
// overlay of a dual-stack next CA.
func rotateBegin(t testing.TB, next *pki.CA, now bool) RotateCA {
	t.Helper()
	return RotateCA{Step: CABegin, Next: next.Fingerprint().String(), NextCACert: next.CertPEM(),
		NextNebulaCACert: next.NebulaCertPEM(), Now: now, NextOverlay6: testOverlay6, At: t0.Add(7 * time.Minute), Actor: "uid:0"}
}

// joiningCertsCmd is certsCmd as written since issue 11: the node stays
// joining.
func joiningCertsCmd(id string) RecordCerts {
	c := certsCmd(id)
	c.Joining = true
	return c
}

// renewTLSCmd renews id's TLS leaf with one identified by fp.
func renewTLSCmd(id, fp string, expires time.Time) RenewTLS {
	return RenewTLS{NodeID: id, Cert: []byte(fp + "-pem"), PublicKey: []byte("key-" + id), Fingerprint: fp,
		Expires: expires, At: t0.Add(5 * time.Minute), Actor: originID}
}

// frozenFullSteps is how many steps of fullHistory the frozen
// testdata/snapshot-v1-full.bin holds.
const frozenFullSteps = 13

const goldenV1Full = "testdata/snapshot-v1-full.bin"

// check fails t unless err is the outcome s expects.
func (s fullStep) check(t testing.TB, err error) {
	t.Helper()
	switch {
	case s.ipTaken:
		if !isIPTaken(err) || codes.Of(err) != "" {
			t.Fatalf("%T: %v (code %q), want bare enroll.ErrIPTaken", s.cmd, err, codes.Of(err))
		}
	case codes.Of(err) != s.want || (s.want == "" && err != nil):
		t.Fatalf("%T: %v (code %q), want code %q", s.cmd, err, codes.Of(err), s.want)
	}
}

// replayHistory applies steps to a new FSM, entry i at raft index i+1.
func replayHistory(t testing.TB, steps []fullStep) *FSM {
	t.Helper()
	f := New()
	for i, s := range steps {
		data, err := Encode(s.cmd)
		if err != nil {
			t.Fatalf("Encode(%T): %v", s.cmd, err)
		}
		r := f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
		err, _ = r.(error)
		if r != nil && err == nil {
			t.Fatalf("Apply returned %T %v", r, r)
		}
		s.check(t, err)
	}
	return f
}

// fullFSM is the state after all of fullHistory.
func fullFSM(t testing.TB) *FSM { return replayHistory(t, fullHistory(t)) }

// TestFullHistoryHasEveryCommandType: every type byte Decode knows is in
// fullHistory, directly or inside a Tracked command.
func TestFullHistoryHasEveryCommandType(t *testing.T) {
	have := map[cmdType]bool{}
	for _, s := range fullHistory(t) {
		have[s.cmd.commandType()] = true
		if tr, ok := s.cmd.(Tracked); ok {
			inner, err := Decode(tr.Inner)
			if err != nil {
				t.Fatal(err)
			}
			have[inner.commandType()] = true
		}
	}
	known := 0
	for b := range 256 {
		if _, err := Decode([]byte{byte(b), '{', '}'}); err != nil {
			continue
		}
		known++
		if !have[cmdType(b)] {
			t.Errorf("command type %d decodes but fullHistory never applies it", b)
		}
	}
	if known != len(have) {
		t.Errorf("Decode knows %d command types, fullHistory has %d", known, len(have))
	}
}

// TestFullFixtureSetsEveryField: every field of every record type the
// snapshot holds is non-zero in at least one record of fullFSM, so that the
// round-trip tests see it. A new field fails here until fullHistory sets it.
func TestFullFixtureSetsEveryField(t *testing.T) {
	seen := fieldsSet{}
	seen.walk(reflect.ValueOf(fullFSM(t).snapshot()))
	for _, typ := range recordTypes(reflect.TypeFor[Snapshot]()) {
		set, ok := seen[typ]
		if !ok {
			t.Errorf("fullFSM holds no %v record", typ)
			continue
		}
		for i, ok := range set {
			if !ok {
				t.Errorf("no %v in fullFSM sets field %s", typ, typ.Field(i).Name)
			}
		}
	}
}

// TestSnapshotRoundTripKeepsEveryField persists fullFSM through a raft
// snapshot store, restores it into a fresh FSM and compares the two field
// by field: a field the writer drops or the reader loses shows up by name.
func TestSnapshotRoundTripKeepsEveryField(t *testing.T) {
	f := fullFSM(t)
	fresh := New()
	if err := fresh.Restore(persist(t, f)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	want, got := f.snapshot(), fresh.snapshot()
	if d := stateDiff(want, got); len(d) > 0 {
		t.Fatalf("restored state differs from the original:\n%s", strings.Join(d, "\n"))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", got, want)
	}
	if fresh.Index() != uint64(len(fullHistory(t))) {
		t.Fatalf("restored index %d, want %d", fresh.Index(), len(fullHistory(t)))
	}
}

// TestRestoredFSMRemembersRequests: after a restore, a retried tracked
// write still answers with its first attempt's result and applies nothing.
func TestRestoredFSMRemembersRequests(t *testing.T) {
	fresh := New()
	if err := fresh.Restore(persist(t, fullFSM(t))); err != nil {
		t.Fatal(err)
	}
	before := stateBytes(t, fresh)
	n := 0
	for _, s := range fullHistory(t) {
		if _, ok := s.cmd.(Tracked); !ok {
			continue
		}
		n++
		s.check(t, apply(t, fresh, s.cmd))
	}
	if n == 0 {
		t.Fatal("fullHistory has no tracked command")
	}
	if !bytes.Equal(before, stateBytes(t, fresh)) {
		t.Fatal("a retried tracked command changed the restored state")
	}
}

// TestRestoredFSMKeepsRenewal: the renewed certificate, not the one from
// admission, is what a restored FSM serves.
func TestRestoredFSMKeepsRenewal(t *testing.T) {
	fresh := New()
	if err := fresh.Restore(persist(t, fullFSM(t))); err != nil {
		t.Fatal(err)
	}
	n, ok := fresh.Node(originID)
	if !ok || string(n.NebulaCert) != "origin-nebula-renewed" || n.NebulaFingerprint != "bb02" ||
		!n.NebulaIssued.Equal(t0.Add(3*time.Minute)) || !n.NebulaExpires.Equal(t0.Add(400*24*time.Hour)) {
		t.Fatalf("restored origin %+v, %v", n, ok)
	}
}

// TestSnapshotGoldenV1Full: the frozen v1 file written from the first
// frozenFullSteps of fullHistory (requests, a renewal, every field) still
// decodes to the state those steps build.
func TestSnapshotGoldenV1Full(t *testing.T) {
	want := replayHistory(t, fullHistory(t)[:frozenFullSteps]).snapshot()
	// Issue 9 made a Nebula renewal retire the certificate it replaces
	// (Node.Retired); the frozen file was written before, when the same
	// steps left Retired empty. The file itself decodes unchanged.
	origin := want.Nodes[originID]
	if !slices.Equal(origin.Retired, []string{"bb01"}) {
		t.Fatalf("the frozen renewal step retired %q, want bb01", origin.Retired)
	}
	origin.Retired = nil
	want.Nodes[originID] = origin
	// Issue 27 made a removal owe a key rotation (Cluster.KeysOwed); the
	// frozen file predates it.
	want.Cluster.KeysOwed = nil
	// Issue 29 made an admission record where the join came from
	// (Node.SeenFrom); the frozen file predates it, and its records
	// restore without it.
	clearSeenFrom(want)
	// Issue 52 made a leave revoke every certificate the node held, as a
	// removal does; the frozen file predates it.
	want.Revocations = slices.DeleteFunc(want.Revocations, func(r Revocation) bool { return want.Nodes[r.NodeID].State == NodeLeft })
	if *update {
		var b bytes.Buffer
		if err := WriteSnapshot(&b, want); err != nil {
			t.Fatal(err)
		}
		writeGolden(t, goldenV1Full, b.Bytes())
	}
	got, err := ReadSnapshot(bytes.NewReader(readGolden(t, goldenV1Full)))
	if err != nil {
		t.Fatalf("the frozen v1 snapshot no longer decodes: %v", err)
	}
	if d := stateDiff(want, got); len(d) > 0 {
		t.Fatalf("the frozen v1 snapshot decodes to another state:\n%s", strings.Join(d, "\n"))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the frozen v1 snapshot decodes to another state:\n got %+v\nwant %+v", got, want)
	}
}

// clearSeenFrom empties every record's SeenFrom, as a snapshot written
// before issue 29 holds them.
func clearSeenFrom(s *Snapshot) {
	for id, n := range s.Nodes {
		n.SeenFrom = ""
		s.Nodes[id] = n
	}
}

// fieldsSet records, per record type of this module, which fields are
// non-zero in at least one value walked.
type fieldsSet map[reflect.Type][]bool

func (fs fieldsSet) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			fs.walk(v.Elem())
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			fs.walk(it.Value())
		}
	case reflect.Slice:
		for i := range v.Len() {
			fs.walk(v.Index(i))
		}
	case reflect.Struct:
		if !isRecord(v.Type()) {
			return
		}
		set := fs[v.Type()]
		if set == nil {
			set = make([]bool, v.NumField())
			fs[v.Type()] = set
		}
		for i := range v.NumField() {
			set[i] = set[i] || !v.Field(i).IsZero()
			fs.walk(v.Field(i))
		}
	}
}

// isRecord reports whether t is a struct of this module, whose fields the
// walkers inspect one by one (time and netip values are compared whole).
func isRecord(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && strings.HasPrefix(t.PkgPath(), "github.com/meshd/meshd/")
}

// recordTypes lists the record types reachable from t, t first.
func recordTypes(t reflect.Type) []reflect.Type {
	var out []reflect.Type
	seen := map[reflect.Type]bool{}
	var visit func(reflect.Type)
	visit = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			visit(t.Elem())
		case reflect.Map:
			visit(t.Key())
			visit(t.Elem())
		case reflect.Struct:
			if !isRecord(t) || seen[t] {
				return
			}
			seen[t] = true
			out = append(out, t)
			for i := range t.NumField() {
				visit(t.Field(i).Type)
			}
		}
	}
	visit(t)
	return out
}

// stateDiff compares two snapshots field by field and describes every
// difference by its path, e.g. `Nodes["n-c1"].NebulaCert`. Times compare
// with Equal and byte slices with bytes.Equal (nil and empty are the same
// to JSON's omitempty); everything else must be equal. A field that is
// zero in got but not in want is called out as dropped.
func stateDiff(want, got *Snapshot) []string {
	var out []string
	diffValue("snapshot", reflect.ValueOf(want), reflect.ValueOf(got), &out)
	return out
}

var timeType = reflect.TypeFor[time.Time]()

func diffValue(path string, want, got reflect.Value, out *[]string) {
	show := func(v reflect.Value) string {
		if b, ok := v.Interface().([]byte); ok {
			return fmt.Sprintf("%q", b)
		}
		return fmt.Sprint(v)
	}
	report := func() {
		if got.IsZero() && !want.IsZero() {
			*out = append(*out, fmt.Sprintf("%s: dropped (zero, want %s)", path, show(want)))
			return
		}
		*out = append(*out, fmt.Sprintf("%s: got %s, want %s", path, show(got), show(want)))
	}
	switch t := want.Type(); {
	case t == timeType:
		if !want.Interface().(time.Time).Equal(got.Interface().(time.Time)) {
			report()
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		if !bytes.Equal(want.Bytes(), got.Bytes()) {
			report()
		}
	case t.Kind() == reflect.Pointer:
		if want.IsNil() != got.IsNil() {
			report()
		} else if !want.IsNil() {
			diffValue(path, want.Elem(), got.Elem(), out)
		}
	case isRecord(t):
		for i := range t.NumField() {
			diffValue(path+"."+t.Field(i).Name, want.Field(i), got.Field(i), out)
		}
	case t.Kind() == reflect.Map:
		for it := want.MapRange(); it.Next(); {
			p := fmt.Sprintf("%s[%v]", path, keyString(it.Key()))
			if g := got.MapIndex(it.Key()); g.IsValid() {
				diffValue(p, it.Value(), g, out)
			} else {
				*out = append(*out, p+": dropped")
			}
		}
		for it := got.MapRange(); it.Next(); {
			if !want.MapIndex(it.Key()).IsValid() {
				*out = append(*out, fmt.Sprintf("%s[%v]: unexpected", path, keyString(it.Key())))
			}
		}
	case t.Kind() == reflect.Slice:
		if want.Len() != got.Len() {
			*out = append(*out, fmt.Sprintf("%s: %d elements, want %d", path, got.Len(), want.Len()))
		}
		for i := range min(want.Len(), got.Len()) {
			diffValue(fmt.Sprintf("%s[%d]", path, i), want.Index(i), got.Index(i), out)
		}
	default:
		if !want.Equal(got) {
			report()
		}
	}
}

func keyString(k reflect.Value) string {
	if s, ok := k.Interface().(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(k) // netip.Addr, enroll.TokenHash: their String
}
