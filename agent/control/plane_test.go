package control

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestAdmitThroughFollower: a follower mints the token, has the CA holder
// sign (forwarded over mTLS), and its ledger's Admit entry is forwarded to
// the leader; both FSMs then hold the node, and the follower's overlay was
// poked at once.
func TestAdmitThroughFollower(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	if !origin.p.Raft().IsVoter(c2.nodeID) || !c2.p.Raft().IsVoter(c2.nodeID) {
		t.Fatal("c2 joined raft but is not a voter")
	}
	if c2.p.Raft().IsLeader() {
		t.Fatal("the joiner took leadership; the test needs it a follower")
	}
	if !origin.p.HoldsCA() || c2.p.HoldsCA() {
		t.Fatalf("holds the CA: origin %v, c2 %v", origin.p.HoldsCA(), c2.p.HoldsCA())
	}
	// A token the leader minted a moment ago is in the follower's ledger
	// (a read index, not whatever c2 happened to have applied).
	if rec, ok, err := c2.p.Ledger().Token(within(t, 5*time.Second), mint(t, origin, "w9", pki.RoleWorker)); err != nil || !ok || rec.Name != "w9" {
		t.Fatalf("the follower's ledger lacks the token just minted: %+v, %v, %v", rec, ok, err)
	}
	pokesBefore, _, _ := c2.hooks.counts()
	id := c.admit(t, c2, "w1", pki.RoleWorker, nil, enroll.Ports{Gossip: 7946, Nebula: 4242})
	if pokes, _, _ := c2.hooks.counts(); pokes <= pokesBefore {
		t.Fatal("the admitting node's overlay was not poked after the admission")
	}
	for _, m := range []*member{origin, c2} {
		waitFor(t, 5*time.Second, m.name+" applies w1", func() bool {
			n, ok := m.p.Raft().FSM().Node(id)
			return ok && n.State == state.NodeActive && n.Role == pki.RoleWorker && n.SerfAddr == ":7946"
		})
	}
	n, _ := origin.p.Raft().FSM().Node(id)
	if n.EnrollAddr != "" || n.RaftAddr != "" {
		t.Fatalf("a worker got control addresses: %+v", n)
	}
	if n.TLSFingerprint == "" || n.NebulaFingerprint == "" || len(n.TLSCert) == 0 || n.TLSExpires.IsZero() {
		t.Fatalf("admitted record lacks its certificates: %+v", n)
	}
	toks, err := c2.p.Tokens(within(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var used int
	for _, tk := range toks {
		if tk.Name == "w1" {
			used++
			if tk.State != "used" || tk.ConsumedBy != "w1" || tk.MintedBy != c2.nodeID {
				t.Fatalf("w1's token: %+v", tk)
			}
		}
	}
	if used != 1 {
		t.Fatalf("%d tokens for w1", used)
	}
	// The seeds in a token are every active control node's enroll address.
	if seeds := origin.p.Seeds(); !slices.Contains(seeds, origin.addr) || !slices.Contains(seeds, c2.addr) || len(seeds) != 2 {
		t.Fatalf("seeds %v", seeds)
	}
	// The name is taken now.
	if _, err := c2.p.Admit(within(t, 5*time.Second), admitReq("w1", pki.RoleWorker), "test"); codes.Of(err) != codes.NameTaken {
		t.Fatalf("admit a taken name: %v, want %s", err, codes.NameTaken)
	}
}

// TestAdmitRefusals: bad input to Admit fails with its code and mints
// nothing.
func TestAdmitRefusals(t *testing.T) {
	_, origin := newCluster(t)
	ctx := within(t, 10*time.Second)
	for _, tc := range []struct {
		name string
		req  func() apitype.AdmitRequest
		want codes.Code
	}{
		{"bad name", func() apitype.AdmitRequest { return admitReq("Not A Name", pki.RoleWorker) }, codes.BadNodeName},
		{"bad role", func() apitype.AdmitRequest { r := admitReq("w2", pki.RoleWorker); r.Role = "king"; return r }, codes.BadRole},
		{"ttl too long", func() apitype.AdmitRequest { r := admitReq("w2", pki.RoleWorker); r.TTL = 2 * time.Hour; return r }, codes.TokenBadTTL},
		{"bad addr", func() apitype.AdmitRequest { r := admitReq("w2", pki.RoleWorker); r.Addr = "not-ip"; return r }, codes.BadRequest},
		{"origin's own name", func() apitype.AdmitRequest { return admitReq("origin", pki.RoleControl) }, codes.NameTaken},
	} {
		if _, err := origin.p.Admit(ctx, tc.req(), "test"); codes.Of(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	if toks, _ := origin.p.Tokens(ctx); len(toks) != 0 {
		t.Fatalf("refused admissions minted %d tokens", len(toks))
	}
	// Defaults: a worker, for 15 minutes; --addr normalised.
	r := admitReq("w3", "")
	r.Addr = "::ffff:127.0.0.9"
	resp, err := origin.p.Admit(ctx, r, "test")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := enroll.ParseToken(resp.Token)
	if err != nil || tok.Role != pki.RoleWorker || tok.Name != "w3" {
		t.Fatalf("token %+v, %v", tok, err)
	}
	if d := time.Until(resp.Expires); d < enroll.DefaultTTL-time.Minute || d > enroll.DefaultTTL {
		t.Fatalf("expires in %s, want about %s", d, enroll.DefaultTTL)
	}
	toks, _ := origin.p.Tokens(ctx)
	if len(toks) != 1 || toks[0].Addr != "127.0.0.9" || toks[0].State != "unused" || toks[0].ID != resp.ID {
		t.Fatalf("tokens %+v", toks)
	}
	// Expired once the clock passes its expiry.
	origin.p.now = func() time.Time { return resp.Expires.Add(time.Second) }
	toks, _ = origin.p.Tokens(ctx)
	if toks[0].State != "expired" {
		t.Fatalf("token state %q after expiry", toks[0].State)
	}
}

// TestPromotionRefusesANodeThatNeverReplicates: a recorded control node
// whose raft never answers is added as a non-voter, not promoted, and
// removed again; the cluster keeps its one voter and its leader.
func TestPromotionRefusesANodeThatNeverReplicates(t *testing.T) {
	c, origin := newCluster(t)
	origin.p.cfg.PromoteTimeout = 300 * time.Millisecond
	id := c.admit(t, origin, "ghost", pki.RoleControl, nil, enroll.Ports{Control: 1, Raft: 1, Gossip: 1, Nebula: 1})
	_, err := origin.p.promoteRecorded(within(t, 10*time.Second), id)
	if codes.Of(err) != codes.JoinUnconfirmed {
		t.Fatalf("promote a node that never replicates: %v, want %s", err, codes.JoinUnconfirmed)
	}
	if origin.p.Raft().IsMember(id) || origin.p.Raft().Voters() != 1 || !origin.p.Raft().IsLeader() {
		t.Fatalf("after the refused promotion: member %v, voters %d, leader %v",
			origin.p.Raft().IsMember(id), origin.p.Raft().Voters(), origin.p.Raft().IsLeader())
	}
	// A worker, or a node with no record, is never added at all.
	w := c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	for _, who := range []string{w, "id-nobody"} {
		if _, err := origin.p.promoteRecorded(within(t, 5*time.Second), who); codes.Of(err) != codes.NodeUnknown {
			t.Fatalf("promote %s: %v, want %s", who, err, codes.NodeUnknown)
		}
	}
}

// TestRemove: removal records the node removed (revoking its
// certificates), takes a control node out of raft, tells gossip, and
// refuses the node itself, the CA holder and unknown names.
func TestRemove(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	w1 := c.admit(t, c2, "w1", pki.RoleWorker, nil, enroll.Ports{})
	ctx := within(t, 20*time.Second)

	for _, tc := range []struct {
		via, name string
		want      codes.Code
	}{
		{"origin", "origin", codes.BadRequest},      // itself
		{"c2", "origin", codes.CAHolderStays},       // the CA holder
		{"origin", "nobody", codes.NodeUnknown},     // no such name
		{"c2", "c2", codes.BadRequest},              // itself, on a follower
		{"origin", "Not A Name", codes.NodeUnknown}, // junk
	} {
		via := map[string]*member{"origin": origin, "c2": c2}[tc.via]
		if err := via.p.Remove(ctx, tc.name, "test"); codes.Of(err) != tc.want {
			t.Errorf("%s removes %s: %v, want %s", tc.via, tc.name, err, tc.want)
		}
	}

	// A worker, removed through a follower.
	before, _ := origin.p.Raft().FSM().Node(w1)
	keyring := func() string {
		cl, _ := c2.p.Raft().FSM().Cluster()
		return state.KeyringID(cl.GossipKeys)
	}
	c2.hooks.mu.Lock()
	c2.hooks.observe = keyring
	c2.hooks.mu.Unlock()
	warnings := len(c2.logs.warnings())
	if err := c2.p.Remove(ctx, "w1", "operator"); err != nil {
		t.Fatalf("remove w1: %v", err)
	}
	waitFor(t, 5*time.Second, "origin applies the removal", func() bool {
		n, _ := origin.p.Raft().FSM().Node(w1)
		return n.State == state.NodeRemoved
	})
	rev := origin.p.Revocations()
	if !slices.Contains(rev.Fingerprints, before.TLSFingerprint) || !slices.Contains(rev.Fingerprints, before.NebulaFingerprint) ||
		!slices.Contains(rev.Gone, w1) {
		t.Fatalf("revocations %+v lack w1's certificates %s %s", rev, before.TLSFingerprint, before.NebulaFingerprint)
	}
	c2.p.wg.Wait() // the force-leave has run
	// Force-left twice: at once, and again once the key rotation has cut
	// w1 off (a w1 still running refutes a leave intent while it holds
	// the gossip key).
	if _, notified, left := c2.hooks.counts(); notified != 1 || !slices.Equal(left, []string{"w1", "w1"}) {
		t.Fatalf("gossip told %d times, force-left %v; want once, [w1 w1]", notified, left)
	}
	c2.hooks.mu.Lock()
	saw := slices.Clone(c2.hooks.forceSaw)
	c2.hooks.observe = nil
	c2.hooks.mu.Unlock()
	if !slices.Contains(saw, keyring()) {
		t.Fatalf("force-left w1 with keyrings %v; none is the rotated one %s", saw, keyring())
	}
	// The stand-in gossip refuses the revocation notice (a warning; workers
	// poll); the force-leave went through (no warning).
	if w := c2.logs.warnings()[warnings:]; len(w) != 1 {
		t.Fatalf("removing w1 logged %d warnings; want 1, for the refused notice", len(w))
	}
	if ev := c2.logs.withCode(codes.EventNodeRemoved); len(ev) != 1 || ev[0].attrs["node"].String() != "w1" {
		t.Fatalf("removal events %v", ev)
	}

	// A control node, removed by the leader: out of raft too.
	if err := origin.p.Remove(ctx, "c2", "operator"); err != nil {
		t.Fatalf("remove c2: %v", err)
	}
	if origin.p.Raft().IsMember(c2.nodeID) {
		t.Fatal("c2 is still in raft after its removal")
	}
	if n, _ := origin.p.Raft().FSM().Node(c2.nodeID); n.State != state.NodeRemoved {
		t.Fatalf("c2 is %s", n.State)
	}
}

// TestLeave: the last voter may not leave; a second voter leaves raft
// through the leader, then has another control node record it left (once
// left it is no longer a member the leader answers), which revokes every
// certificate it held (issue 52: on main a leave revoked nothing).
func TestLeave(t *testing.T) {
	c, origin := newCluster(t)
	if err := origin.p.LeaveVoterCheck(); codes.Of(err) != codes.QuorumLoss {
		t.Fatalf("the only voter may leave: %v", err)
	}
	c2 := c.joinControl(t, origin, "c2")
	if err := origin.p.LeaveVoterCheck(); err != nil {
		t.Fatalf("one of two voters: %v", err)
	}
	ctx := within(t, 20*time.Second)
	if err := c2.p.LeaveRaft(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.p.RecordLeft(ctx, "uid=0@c2", enroll.TokenHash{}); err != nil {
		t.Fatal(err)
	}
	// Asked of origin, which records c2's operator, relayed by itself.
	a := origin.p.Raft().FSM().Audit()
	if i := slices.IndexFunc(a, func(e state.AuditEvent) bool { return e.Code == codes.EventNodeLeft }); i < 0 || a[i].Actor != "uid=0@c2 via origin" {
		t.Fatalf("c2's leave audited as %+v, want by uid=0@c2 via origin", a)
	}
	// A follower has no leadership to hand off: nothing to warn about.
	if w := c2.logs.warnings(); len(w) != 0 {
		t.Fatalf("leaving logged warnings: %v", w)
	}
	waitFor(t, 5*time.Second, "c2 out of raft and recorded left", func() bool {
		n, _ := origin.p.Raft().FSM().Node(c2.nodeID)
		return !origin.p.Raft().IsMember(c2.nodeID) && n.State == state.NodeLeft
	})
	left, _ := origin.p.Raft().FSM().Node(c2.nodeID)
	if rev := origin.p.Revocations(); !slices.Contains(rev.Gone, c2.nodeID) || !slices.Contains(rev.Fingerprints, left.TLSFingerprint) ||
		!slices.Contains(rev.Fingerprints, left.NebulaFingerprint) {
		t.Fatalf("revocations after a leave: %+v, want both of c2's certificates", rev)
	}
}

// TestRenewNebulaCerts: the CA holder renews a cert past its renewal
// point (within 2/3 to 3/4 of its lifetime) and leaves younger ones alone; a node without the CA renews
// nothing.
func TestRenewNebulaCerts(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	ctx := within(t, 20*time.Second)
	before, _ := origin.p.Raft().FSM().Node(c2.nodeID)

	// A minute on, an hour's cert is not due. (A renewal would sign a cert
	// other than the one signed a moment ago, and record the new issue time.)
	soon := time.Now().Add(time.Minute)
	origin.p.now = func() time.Time { return soon }
	origin.p.RenewNebulaCerts(ctx)
	if n, _ := origin.p.Raft().FSM().Node(c2.nodeID); n.NebulaFingerprint != before.NebulaFingerprint ||
		!n.NebulaIssued.Equal(before.NebulaIssued) {
		t.Fatal("a fresh cert was renewed")
	}
	later := time.Now().Add(46 * time.Minute) // past 3/4 of an hour
	c2.p.now = func() time.Time { return later }
	c2.p.RenewNebulaCerts(ctx)
	if n, _ := origin.p.Raft().FSM().Node(c2.nodeID); n.NebulaFingerprint != before.NebulaFingerprint {
		t.Fatal("a node without the CA renewed a cert")
	}
	origin.p.now = func() time.Time { return later }
	origin.p.RenewNebulaCerts(ctx)
	after, _ := origin.p.Raft().FSM().Node(c2.nodeID)
	if after.NebulaFingerprint == before.NebulaFingerprint || !after.NebulaIssued.Equal(later) || !after.NebulaExpires.After(before.NebulaExpires) {
		t.Fatalf("not renewed: before %s/%s, after %s/%s issued %s", before.NebulaFingerprint, before.NebulaExpires,
			after.NebulaFingerprint, after.NebulaExpires, after.NebulaIssued)
	}
	// Signed for the key and overlay IP the node enrolled with.
	if err := pki.CheckNebulaCert(c.ca.NebulaCertPEM(), after.NebulaCert, c2.keys.NebulaKeyPEM, after.OverlayIP, later); err != nil {
		t.Fatalf("renewed cert does not fit c2's key and IP: %v", err)
	}
	// The renewal is an event with its code; nothing went wrong.
	if ev := origin.logs.withCode(codes.EventCertRenewed); len(ev) != 1 || ev[0].attrs["node"].String() != "c2" {
		t.Fatalf("renewal events %v; want one, for c2", ev)
	}
	if w := origin.logs.warnings(); len(w) != 0 {
		t.Fatalf("a clean renewal logged warnings: %v", w)
	}
	waitFor(t, 5*time.Second, "c2 applies the renewal", func() bool {
		return string(c2.p.OwnNebulaCert()) == string(after.NebulaCert)
	})
}

// TestRenewMissingAndFailing: a record without a Nebula cert gets one at
// the next renewal, even when its recorded validity looks fresh; a record
// whose key cannot be signed for is skipped with a coded warning, and the
// others are renewed all the same.
func TestRenewMissingAndFailing(t *testing.T) {
	c, origin := newCluster(t)
	ctx := within(t, 10*time.Second)
	now := time.Now()
	record := func(name string, pub []byte) string {
		t.Helper()
		h := mint(t, origin, name, pki.RoleWorker)
		ip := freeIP(t, origin)
		id := "id-" + name
		// A v1 entry (a TLS fingerprint, no Nebula cert): active at once.
		if err := origin.p.Write(ctx, &state.Admit{Admission: enroll.Admission{Token: h, NodeID: id, Name: name,
			Role: pki.RoleWorker, Underlay: "127.0.0.1", SourceAddr: "127.0.0.1", OverlayIP: ip, NebulaPub: pub, At: now},
			Node: state.Node{TLSFingerprint: "tls-" + name, NebulaIssued: now, NebulaExpires: now.Add(time.Hour)}, Actor: "test"}); err != nil {
			t.Fatalf("record %s: %v", name, err)
		}
		return id
	}
	keys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	w1 := record("w1", keys.NebulaPublicPEM)
	bad := record("bad", []byte("not a key"))

	origin.p.RenewNebulaCerts(ctx)
	n, _ := origin.p.Raft().FSM().Node(w1)
	if len(n.NebulaCert) == 0 {
		t.Fatal("a record without a Nebula cert was not given one")
	}
	if err := pki.CheckNebulaCert(c.ca.NebulaCertPEM(), n.NebulaCert, keys.NebulaKeyPEM, n.OverlayIP, now); err != nil {
		t.Fatalf("the new cert does not fit w1's key and IP: %v", err)
	}
	if b, _ := origin.p.Raft().FSM().Node(bad); len(b.NebulaCert) != 0 {
		t.Fatal("a cert was recorded for a key that cannot be signed for")
	}
	w := origin.logs.warnings()
	if len(w) != 1 || w[0].attrs["node"].String() != "bad" || w[0].attrs["code"].String() == "" {
		t.Fatalf("warnings %v; want one, coded, for bad", w)
	}
}

// TestCloseAlone: closing the only voter shuts raft down; with no other
// voter to hand leadership to, there is nothing to warn about.
func TestCloseAlone(t *testing.T) {
	_, origin := newCluster(t)
	if err := origin.p.Close(); err != nil {
		t.Fatal(err)
	}
	if !origin.p.Raft().IsShutdown() {
		t.Fatal("raft still runs after Close")
	}
	if w := origin.logs.warnings(); len(w) != 0 {
		t.Fatalf("closing logged warnings: %v", w)
	}
}

// TestRenewDue: renewal within 2/3 to 3/4 of the lifetime, and at once
// when the validity is unknown.
func TestRenewDue(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := issued.Add(30 * time.Hour)
	for _, tc := range []struct {
		name            string
		issued, expires time.Time
		now             time.Time
		want            bool
	}{
		{"fresh", issued, expires, issued.Add(time.Hour), false},
		{"just before 2/3", issued, expires, issued.Add(20*time.Hour - time.Nanosecond), false},
		{"at 3/4", issued, expires, issued.Add(22*time.Hour + 30*time.Minute), true},
		{"expired", issued, expires, expires.Add(time.Hour), true},
		{"unknown issue time", time.Time{}, expires, issued, true},
		{"expiry not after issue", issued, issued, issued, true},
	} {
		if got := RenewDue(tc.issued, tc.expires, tc.now, "any-node"); got != tc.want {
			t.Errorf("%s: RenewDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRenewSpread: a thousand nodes issued the same moment fall due
// across the whole window from 2/3 to 3/4 of the lifetime (issue 32:
// a rack joined together is not renewed together): none outside it,
// every tenth of it holding some and none more than twice its share,
// and a node's point the same at every call (the CA holder and the node
// agree).
func TestRenewSpread(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := issued.Add(30 * 24 * time.Hour)
	from, to := issued.Add(20*24*time.Hour), issued.Add(22*24*time.Hour+12*time.Hour)
	var tenths [10]int
	for i := range 1000 {
		id := fmt.Sprintf("%032x", i*7919)
		at := RenewAt(issued, expires, id)
		if at.Before(from) || !at.Before(to) || !at.Equal(RenewAt(issued, expires, id)) {
			t.Fatalf("node %s due at %s: want the same point in [%s, %s)", id, at, from, to)
		}
		if RenewDue(issued, expires, at.Add(-time.Nanosecond), id) || !RenewDue(issued, expires, at, id) {
			t.Fatalf("node %s: RenewDue does not turn at RenewAt", id)
		}
		tenths[int(10*at.Sub(from)/to.Sub(from))]++
	}
	for i, k := range tenths {
		if k == 0 || k > 200 {
			t.Fatalf("tenth %d of the window holds %d of 1000 renewals: %v", i, k, tenths)
		}
	}
}

// TestNodeRows: the node list shows raft roles and gossip statuses, and
// the version a member advertises in gossip (what it runs) over the one
// its record holds (what joined): after an upgrade they differ.
func TestNodeRows(t *testing.T) {
	c, origin := newCluster(t)
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	origin.hooks.mu.Lock()
	origin.hooks.gossip = map[string]string{"w1": "alive"}
	origin.hooks.versions = map[string]string{"w1": "2.0.0"}
	origin.hooks.mu.Unlock()
	rows, err := origin.p.Nodes(within(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Name] = r.Role + "/" + r.Raft + "/" + r.Gossip + "/" + r.State
		if rec, _ := origin.p.raft.FSM().NodeByName(r.Name); r.Name == "w1" && r.Version != "2.0.0" {
			t.Errorf("w1 lists version %q, want the advertised 2.0.0 (its record has %q)", r.Version, rec.Version)
		} else if r.Name == "origin" && r.Version != rec.Version {
			t.Errorf("origin lists version %q, want its record's %q (it advertises none)", r.Version, rec.Version)
		}
		if r.OverlayIP == "" {
			t.Errorf("%s has no overlay IP", r.Name)
		}
	}
	want := map[string]string{"origin": "control/leader/unknown/active", "w1": "worker/none/alive/active"}
	if len(got) != len(want) || got["origin"] != want["origin"] || got["w1"] != want["w1"] {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if r := NodeRow(state.Node{Name: "x"}, ""); r.Raft != string(raftnode.None) || r.OverlayIP != "" {
		t.Fatalf("row without raft role or overlay IP: %+v", r)
	}
}
