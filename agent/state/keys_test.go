package state

import (
	"bytes"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// keyRecord is a reusable enrolment key (seed) for uses machines named
// prefix + n, living a day from t0.
func keyRecord(seed byte, uses int, prefix string) enroll.TokenRecord {
	return enroll.TokenRecord{
		Hash: secret(seed).Hash(), Role: pki.RoleWorker, Created: t0, Expires: t0.Add(24 * time.Hour), MintedBy: originID,
		Key: enroll.KeyLimits{Uses: uses, NamePrefix: prefix},
	}
}

// keyJoinCmd is the admission of machine m with key seed, as the enroll
// server writes it: no name (the FSM gives one), the node id the key
// gives that machine's TLS key, host as the joiner's hostname.
func keyJoinCmd(seed byte, m, host string) Admit {
	tlsKey := []byte("tls-key-" + m)
	id := enroll.KeyNodeID(secret(seed).Hash(), tlsKey)
	a := enroll.Admission{
		Token: secret(seed).Hash(), NodeID: id, Role: pki.RoleWorker,
		Underlay: "198.51.100.9", SourceAddr: "198.51.100.9",
		TLSPublicKey: tlsKey, NebulaPub: []byte("nebula-pub-" + m),
		Version: "0.2.0", At: t0.Add(time.Minute), HostName: host,
	}
	return Admit{Admission: a, Node: Node{ID: id, Role: pki.RoleWorker, NebulaPort: 4242}, Actor: originID}
}

// admittedName is the name the record of c's admission holds.
func admittedName(t *testing.T, f *FSM, c Admit) string {
	t.Helper()
	n, ok := f.Node(c.Admission.NodeID)
	if !ok {
		t.Fatalf("no node %s after its admission", c.Admission.NodeID)
	}
	return n.Name
}

// TestKeyAdmitsUpToItsUses: a key gives names prefix-1, prefix-2, ... in
// order, counts each use, and refuses the admission past its uses with
// KeyExhausted, changing nothing.
func TestKeyAdmitsUpToItsUses(t *testing.T) {
	f := bootstrapped(t)
	k := keyRecord(40, 3, "web-")
	k.Ephemeral = true
	mustApply(t, f, MintToken{Record: k, Actor: "uid:0"})
	for i, want := range []string{"web-1", "web-2", "web-3"} {
		c := keyJoinCmd(40, want, "")
		mustApply(t, f, c)
		if got := admittedName(t, f, c); got != want {
			t.Fatalf("admission %d named %q, want %q", i+1, got, want)
		}
		if n, _ := f.Node(c.Admission.NodeID); !n.Ephemeral || n.Token != k.Hash {
			t.Fatalf("node %s: ephemeral %v token %s, want the key's", want, n.Ephemeral, n.Token)
		}
	}
	rec, _ := f.Token(k.Hash)
	if rec.Key.Used != 3 || !rec.Exhausted() || rec.Consumed() || !rec.Key.LastUsed.Equal(t0.Add(time.Minute)) {
		t.Fatalf("key after 3 admissions: %+v", rec.Key)
	}
	before := stateBytes(t, f)
	if got := codes.Of(apply(t, f, keyJoinCmd(40, "fourth", ""))); got != codes.KeyExhausted {
		t.Fatalf("fourth admission: code %q, want %q", got, codes.KeyExhausted)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a refused admission changed the state")
	}
}

// TestKeyNameFromHost: with --name-from-host a valid, free hostname is the
// name; an invalid or held one falls back to the prefix. Without the flag
// the hostname is never used.
func TestKeyNameFromHost(t *testing.T) {
	f := bootstrapped(t)
	k := keyRecord(41, 10, "ci-")
	k.Key.NameFromHost = true
	mustApply(t, f, MintToken{Record: k, Actor: "uid:0"})
	mustApply(t, f, MintToken{Record: keyRecord(42, 10, "db-"), Actor: "uid:0"})
	for _, tc := range []struct {
		seed      byte
		m, host   string
		want      string
		rationale string
	}{
		{41, "a", "builder-7", "builder-7", "a valid, free hostname"},
		{41, "b", "builder-7", "ci-1", "the hostname is held"},
		{41, "c", "Bad_Host", "ci-2", "an invalid hostname"},
		{41, "d", "ctl-0", "ci-3", "a name the origin holds"},
		{42, "e", "db-host", "db-1", "a key without --name-from-host"},
	} {
		c := keyJoinCmd(tc.seed, tc.m, tc.host)
		mustApply(t, f, c)
		if got := admittedName(t, f, c); got != tc.want {
			t.Errorf("%s: named %q, want %q", tc.rationale, got, tc.want)
		}
	}
}

// TestKeyAbortGivesUseBack: an admission undone before its certificates
// were recorded gives its use back, and the next joiner gets the freed
// name.
func TestKeyAbortGivesUseBack(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: keyRecord(43, 1, "w-"), Actor: "uid:0"})
	c := keyJoinCmd(43, "a", "")
	mustApply(t, f, c)
	mustApply(t, f, AbortAdmission{NodeID: c.Admission.NodeID, At: t0.Add(2 * time.Minute)})
	if rec, _ := f.Token(secret(43).Hash()); rec.Key.Used != 0 {
		t.Fatalf("used %d after the abort, want 0", rec.Key.Used)
	}
	again := keyJoinCmd(43, "b", "")
	mustApply(t, f, again)
	if got := admittedName(t, f, again); got != "w-1" {
		t.Fatalf("after the abort the next joiner is %q, want w-1", got)
	}
}

// TestKeyRefusals: a revoked or expired key admits nobody; a name in the
// admission is refused (the cluster names a key's joiners).
func TestKeyRefusals(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: keyRecord(44, 5, "r-"), Actor: "uid:0"})
	mustApply(t, f, MintToken{Record: keyRecord(45, 5, "x-"), Actor: "uid:0"})
	mustApply(t, f, MintToken{Record: keyRecord(46, 5, "n-"), Actor: "uid:0"})
	mustApply(t, f, RevokeToken{Hash: secret(44).Hash(), At: t0.Add(30 * time.Second), Actor: "uid:0"})
	late := keyJoinCmd(45, "a", "")
	late.Admission.At = t0.Add(25 * time.Hour)
	named := keyJoinCmd(46, "b", "")
	named.Admission.Name = "chosen"
	for _, tc := range []struct {
		c    Admit
		want codes.Code
	}{
		{keyJoinCmd(44, "a", ""), codes.TokenRevoked},
		{late, codes.TokenExpired},
		{named, codes.TokenNameDiffer},
	} {
		if got := codes.Of(apply(t, f, tc.c)); got != tc.want {
			t.Errorf("admission: code %q, want %q", got, tc.want)
		}
	}
}

// TestMintKeyChecks: the FSM refuses a key whose limits are out of
// bounds, that names a node, admits control nodes or waits for approval,
// or whose prefix overlaps a live key's; a revoked key's prefix is free.
func TestMintKeyChecks(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: keyRecord(50, 5, "web-"), Actor: "uid:0"})
	mk := func(seed byte, edit func(*enroll.TokenRecord)) MintToken {
		r := keyRecord(seed, 5, "api-")
		edit(&r)
		return MintToken{Record: r, Actor: "uid:0"}
	}
	for _, tc := range []struct {
		name string
		c    MintToken
		want codes.Code
	}{
		{"no uses", mk(51, func(r *enroll.TokenRecord) { r.Key.Uses = 0 }), codes.BadNodeName}, // not a key: a token without a name
		{"too many uses", mk(51, func(r *enroll.TokenRecord) { r.Key.Uses = enroll.MaxKeyUses + 1 }), codes.KeyBadLimits},
		{"31 days", mk(51, func(r *enroll.TokenRecord) { r.Expires = t0.Add(31 * 24 * time.Hour) }), codes.KeyBadLimits},
		{"bad prefix", mk(51, func(r *enroll.TokenRecord) { r.Key.NamePrefix = "-x" }), codes.KeyBadLimits},
		{"a name", mk(51, func(r *enroll.TokenRecord) { r.Name = "api-1" }), codes.BadRequest},
		{"control", mk(51, func(r *enroll.TokenRecord) { r.Role = pki.RoleControl }), codes.BadRole},
		{"approve", mk(51, func(r *enroll.TokenRecord) { r.Approve = true }), codes.BadRequest},
		{"overlaps web-", mk(51, func(r *enroll.TokenRecord) { r.Key.NamePrefix = "web-1" }), codes.KeyPrefixTaken},
		{"started by web-", mk(51, func(r *enroll.TokenRecord) { r.Key.NamePrefix = "we" }), codes.KeyPrefixTaken},
		{"ephemeral control token", MintToken{Record: func() enroll.TokenRecord {
			r := tokenRecord(51, "c9", pki.RoleControl)
			r.Ephemeral = true
			return r
		}()}, codes.BadRole},
	} {
		if got := codes.Of(apply(t, f, tc.c)); got != tc.want {
			t.Errorf("%s: code %q, want %q", tc.name, got, tc.want)
		}
	}
	mustApply(t, f, RevokeToken{Hash: secret(50).Hash(), At: t0.Add(time.Minute), Actor: "uid:0"})
	mustApply(t, f, mk(52, func(r *enroll.TokenRecord) { r.Key.NamePrefix = "web-"; r.Created = t0.Add(2 * time.Minute) }))
}

// TestKeyMachineRejoinsItsRecord: the same machine (same TLS key, so the
// same node id) admitted again with the key after its node was removed
// reuses its record: the same name and overlay IP, another use spent.
func TestKeyMachineRejoinsItsRecord(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: keyRecord(47, 5, "m-"), Actor: "uid:0"})
	c := keyJoinCmd(47, "a", "")
	mustApply(t, f, c)
	mustApply(t, f, certsCmd(c.Admission.NodeID))
	first, _ := f.Node(c.Admission.NodeID)
	mustApply(t, f, SetNodeState{NodeID: first.ID, State: NodeRemoved, At: t0.Add(3 * time.Minute)})
	again := keyJoinCmd(47, "a", "")
	again.Admission.At = t0.Add(4 * time.Minute)
	mustApply(t, f, again)
	n, _ := f.Node(first.ID)
	if n.Name != "m-1" || n.OverlayIP != first.OverlayIP || n.State != NodeJoining || n.Prior != NodeRemoved {
		t.Fatalf("rejoined record %+v, want m-1 at %s joining", n, first.OverlayIP)
	}
	if rec, _ := f.Token(secret(47).Hash()); rec.Key.Used != 2 {
		t.Fatalf("used %d, want 2", rec.Key.Used)
	}
}
