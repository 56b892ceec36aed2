package control

import (
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestSeedTokensRevoked (issue 27 item 7): a token names its seeds' node
// ids; removing a control node revokes every unused token naming it
// (audited with the seed's name), and leaves alone a token naming only
// the others; a token naming a node that is no active control node (a
// mint that raced a removal) is revoked by the sweep too.
func TestSeedTokensRevoked(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	asked := 0
	origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin"), "c2": as("c2")})
	both, err := origin.p.Admit(within(t, 5*time.Second), admitReq("w1", pki.RoleWorker), "uid:0")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := enroll.ParseToken(both.Token)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tok.SeedIDs, c2.nodeID) || !slices.Contains(tok.SeedIDs, origin.nodeID) || len(tok.SeedIDs) != len(tok.Seeds) {
		t.Fatalf("token seeds %v ids %v, want origin's and c2's", tok.Seeds, tok.SeedIDs)
	}
	// A mint recorded with a node id that is no control node: as if it
	// raced that node's removal.
	now := time.Now().Truncate(time.Second)
	raced := enroll.TokenRecord{Hash: enroll.TokenHash{1}, Name: "w3", Role: pki.RoleWorker, Created: now,
		Expires: now.Add(time.Hour), MintedBy: origin.nodeID, SeedIDs: []string{origin.nodeID, "id-gone"}}
	if err := origin.p.Write(within(t, 5*time.Second), &state.MintToken{Record: raced, Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	if err := origin.p.Remove(within(t, 30*time.Second), "c2", "uid:0"); err != nil {
		t.Fatalf("remove c2: %v", err)
	}
	_, err = origin.p.Admit(within(t, 5*time.Second), admitReq("w2", pki.RoleWorker), "uid:0")
	if err != nil {
		t.Fatal(err)
	}
	toks := map[string]enroll.TokenRecord{}
	for _, r := range origin.p.Raft().FSM().Tokens() {
		toks[r.Name] = r
	}
	if r := toks["w1"]; !r.Revoked() || r.RevokedBy != "meshd (seed c2 gone)" {
		t.Fatalf("the token naming removed c2: revoked %v by %q", r.RevokedAt, r.RevokedBy)
	}
	if r := toks["w3"]; !r.Revoked() {
		t.Fatal("the token naming a node that is no control node was not revoked")
	}
	if r := toks["w2"]; r.Revoked() || !slices.Equal(r.SeedIDs, []string{origin.nodeID}) {
		t.Fatalf("the token minted after the removal: revoked %v, seeds %v", r.Revoked(), r.SeedIDs)
	}
	n := 0
	for _, e := range origin.p.Raft().FSM().Audit() {
		if e.Code == codes.TokenRevoked && e.Actor == "meshd (seed c2 gone)" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d revocations audited as c2's departure, want 1", n)
	}
}

// TestSeedTokensRevokedOnLeave (issue 52 item 3): a control node that
// leaves is a departed seed like a removed one: the unused token naming
// it (here a control token for c4, the one a copy of c2 would harvest) is
// revoked with its leave. On main a node that left "in good standing"
// revoked nothing, and the copy joined as c4. The one token the leaving
// node keeps for its own `join --force` (c5's) stays usable.
func TestSeedTokensRevokedOnLeave(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	ctx := within(t, 30*time.Second)
	c4, err := origin.p.Admit(ctx, admitReq("c4", pki.RoleControl), "uid:0")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := enroll.ParseToken(c4.Token); err != nil || !slices.Contains(tok.SeedIDs, c2.nodeID) {
		t.Fatalf("c4's token names %v (%v), want c2 among them", tok.SeedIDs, err)
	}
	c5, err := origin.p.Admit(ctx, admitReq("c5", pki.RoleControl), "uid:0")
	if err != nil {
		t.Fatal(err)
	}
	keep, err := enroll.ParseToken(c5.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.p.LeaveRaft(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.p.RecordLeft(ctx, "uid=0@c2", keep.Secret.Hash()); err != nil {
		t.Fatal(err)
	}
	origin.p.SweepSeedTokens(ctx) // the leader's pass leaves the kept token alone too
	for _, r := range origin.p.Raft().FSM().Tokens() {
		if r.Name == "c4" && (!r.Revoked() || r.RevokedBy != "meshd (seed c2 gone)") {
			t.Fatalf("c4's token naming c2, which left: revoked %v by %q", r.RevokedAt, r.RevokedBy)
		}
		if r.Name == "c5" && r.Revoked() {
			t.Fatal("the token c2 kept for its join --force was revoked")
		}
	}
	// And a joiner asking origin's time learns c2's leaf is revoked.
	n, _ := origin.p.Raft().FSM().Node(c2.nodeID)
	v, leaves := origin.p.Ledger().SeedRevocations()
	if v != len(origin.p.Raft().FSM().Revocations()) || !slices.Contains(leaves, n.TLSFingerprint) {
		t.Fatalf("time answer's revocations: version %d, leaves %v; want c2's leaf %s", v, leaves, n.TLSFingerprint)
	}
}
