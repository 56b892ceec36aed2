package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// testIdentity is what a verified JWT with jti admits: a worker named
// under "ci-", valid for an hour from t0.
func testIdentity(jti string) *enroll.Identity {
	sum := sha256.Sum256([]byte("https://issuer.test\x00" + jti))
	return &enroll.Identity{Issuer: "https://issuer.test", Subject: "repo:acme/app", JTI: hex.EncodeToString(sum[:]),
		Expires: t0.Add(time.Hour), Role: pki.RoleWorker, Groups: []string{"ci"}, Prefix: "ci-", Rule: 0}
}

// identityJoinCmd is the admission of machine m by identity id, as the
// enroll server writes it (no token; the node id the JWT's replay key
// gives the machine's TLS key).
func identityJoinCmd(t testing.TB, id *enroll.Identity, m string) Admit {
	t.Helper()
	key, err := id.ReplayKey()
	if err != nil {
		t.Fatal(err)
	}
	tlsKey := []byte("tls-key-" + m)
	nodeID := enroll.KeyNodeID(key, tlsKey)
	a := enroll.Admission{
		NodeID: nodeID, Name: id.Name, Role: id.Role, Underlay: "198.51.100.9", SourceAddr: "198.51.100.9",
		TLSPublicKey: tlsKey, NebulaPub: []byte("nebula-pub-" + m), Version: "0.2.0", At: t0.Add(time.Minute), Identity: id,
	}
	return Admit{Admission: a, Node: Node{ID: nodeID, Role: id.Role, NebulaPort: 4242}, Actor: originID}
}

// TestIdentityAdmitsOnce: a verified JWT admits one node under the name
// its rule gives (prefix-N or a claim's name), with the rule's groups;
// the same JWT again is JWTReplayed and changes nothing; an expired one
// is JWTExpired; a claim's name held by a record is NameTaken.
func TestIdentityAdmitsOnce(t *testing.T) {
	f := bootstrapped(t)
	c := identityJoinCmd(t, testIdentity("run-1"), "a")
	mustApply(t, f, c)
	n, ok := f.Node(c.Admission.NodeID)
	if !ok || n.Name != "ci-1" || n.Role != pki.RoleWorker || len(n.Groups) != 1 || n.Groups[0] != "ci" || n.State != NodeJoining {
		t.Fatalf("admitted by identity: %+v", n)
	}
	before := stateBytes(t, f)
	if got := codes.Of(apply(t, f, identityJoinCmd(t, testIdentity("run-1"), "b"))); got != codes.JWTReplayed {
		t.Fatalf("the same JWT again: code %q, want %q", got, codes.JWTReplayed)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a replayed JWT changed the state")
	}
	late := identityJoinCmd(t, testIdentity("run-2"), "c")
	late.Admission.At = t0.Add(2 * time.Hour)
	if got := codes.Of(apply(t, f, late)); got != codes.JWTExpired {
		t.Fatalf("an expired JWT: code %q, want %q", got, codes.JWTExpired)
	}
	named := testIdentity("run-3")
	named.Name, named.Prefix = "ci-1", ""
	if got := codes.Of(apply(t, f, identityJoinCmd(t, named, "d"))); got != codes.NameTaken {
		t.Fatalf("a claim's name held by a node: code %q, want %q", got, codes.NameTaken)
	}
	named.Name = "deploy-7"
	nc := identityJoinCmd(t, named, "d")
	mustApply(t, f, nc)
	if n, _ := f.Node(nc.Admission.NodeID); n.Name != "deploy-7" {
		t.Fatalf("a claim's name: admitted as %q", n.Name)
	}
}

// TestIdentityAbortAndPrune: an admission by identity undone before its
// certificates were recorded gives the JWT back (the same JWT admits
// again); PruneTokens drops the replay record of a JWT that expired before
// the cut-off, and keeps a live one.
func TestIdentityAbortAndPrune(t *testing.T) {
	f := bootstrapped(t)
	c := identityJoinCmd(t, testIdentity("run-1"), "a")
	mustApply(t, f, c)
	mustApply(t, f, AbortAdmission{NodeID: c.Admission.NodeID, At: t0.Add(2 * time.Minute)})
	mustApply(t, f, identityJoinCmd(t, testIdentity("run-1"), "b"))
	short := testIdentity("run-2")
	short.Expires = t0.Add(10 * time.Minute)
	mustApply(t, f, identityJoinCmd(t, short, "c"))
	if got := f.PrunableJTIs(t0.Add(30 * time.Minute)); got != 1 {
		t.Fatalf("prunable JWT records %d, want 1", got)
	}
	mustApply(t, f, PruneTokens{Before: t0.Add(30 * time.Minute), At: t0.Add(31 * time.Minute)})
	if got := codes.Of(apply(t, f, identityJoinCmd(t, testIdentity("run-1"), "d"))); got != codes.JWTReplayed {
		t.Fatalf("a live JWT after the prune: code %q, want %q (its record kept)", got, codes.JWTReplayed)
	}
	if f.PrunableJTIs(t0.Add(30*time.Minute)) != 0 {
		t.Fatal("the expired JWT's record survived the prune")
	}
}

// TestIdentityRefusals: the FSM checks the identity again: no replay key,
// an ephemeral control node, a token alongside are refused.
func TestIdentityRefusals(t *testing.T) {
	f := bootstrapped(t)
	noKey := testIdentity("x")
	eph := testIdentity("y")
	eph.Role, eph.Ephemeral = pki.RoleControl, true
	withToken := identityJoinCmd(t, testIdentity("z"), "z")
	withToken.Admission.Token = secret(1).Hash()
	c1 := identityJoinCmd(t, noKey, "x")
	noKeyID := *noKey
	noKeyID.JTI = ""
	c1.Admission.Identity = &noKeyID
	for _, tc := range []struct {
		name string
		c    Admit
		want codes.Code
	}{
		{"no replay key", c1, codes.JWTNoRule},
		{"ephemeral control", identityJoinCmd(t, eph, "y"), codes.JWTNoRule},
		{"with a token", withToken, codes.BadRequest},
	} {
		if got := codes.Of(apply(t, f, tc.c)); got != tc.want {
			t.Errorf("%s: code %q, want %q", tc.name, got, tc.want)
		}
	}
}
