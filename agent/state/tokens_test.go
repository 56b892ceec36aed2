package state

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// revokeFixture is admitFixture with w1's token (seed 1) revoked at
// t0+30s by uid:0.
func revokeFixture(t *testing.T) *FSM {
	f := admitFixture(t)
	mustApply(t, f, RevokeToken{Hash: secret(1).Hash(), At: t0.Add(30 * time.Second), Actor: "uid:0"})
	return f
}

// TestRevokeThenAdmit: a revoked token admits nobody (TokenRevoked, the
// compare-and-set in Admit) and the refusal changes nothing; the record
// keeps who revoked it and when, and the audit ring says so.
func TestRevokeThenAdmit(t *testing.T) {
	f := revokeFixture(t)
	rec, ok := f.Token(secret(1).Hash())
	if !ok || !rec.Revoked() || !rec.RevokedAt.Equal(t0.Add(30*time.Second)) || rec.RevokedBy != "uid:0" || rec.Consumed() {
		t.Fatalf("revoked record = %+v, %v", rec, ok)
	}
	a := f.Audit()
	if last := a[len(a)-1]; last.Code != codes.TokenRevoked || last.Subject != "w1" || last.Actor != "uid:0" ||
		!last.At.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("last audit event %+v, want the revocation", last)
	}
	before := stateBytes(t, f)
	if got := codes.Of(apply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))); got != codes.TokenRevoked {
		t.Fatalf("admit with a revoked token: code %q, want %q", got, codes.TokenRevoked)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a refused admission changed the state")
	}
	if _, ok := f.NodeByName("w1"); ok || f.IPAllocated(netip.MustParseAddr("10.42.0.2")) {
		t.Fatal("a revoked token recorded a node or an IP")
	}
	// Revoked is decided before expired: the operator learns the reason
	// that matters.
	late := admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2")
	late.Admission.At = t0.Add(time.Hour)
	if got := codes.Of(apply(t, f, late)); got != codes.TokenRevoked {
		t.Fatalf("admit with a revoked, expired token: code %q, want %q", got, codes.TokenRevoked)
	}
	// Other tokens are untouched.
	mustApply(t, f, admitCmd(2, "n-c1", "c1", pki.RoleControl, "10.42.0.3"))
}

func TestRevokeToken(t *testing.T) {
	expired := tokenRecord(20, "old", pki.RoleWorker)
	expired.Created, expired.Expires = t0.Add(-time.Hour), t0.Add(-50*time.Minute)
	for _, tc := range []struct {
		name string
		fsm  func(*testing.T) *FSM
		cmd  RevokeToken
		want codes.Code
		// changed: success that records the revocation; a success that
		// changes nothing is an idempotent repeat.
		changed bool
	}{
		{name: "ok/unused", fsm: admitFixture, cmd: RevokeToken{Hash: secret(1).Hash(), At: t0, Actor: "uid:0"}, changed: true},
		{name: "ok/expired-unused", fsm: func(t *testing.T) *FSM {
			f := admitFixture(t)
			mustApply(t, f, MintToken{Record: expired})
			return f
		}, cmd: RevokeToken{Hash: expired.Hash, At: t0}, changed: true},
		{name: "ok/again-keeps-the-first", fsm: revokeFixture,
			cmd: RevokeToken{Hash: secret(1).Hash(), At: t0.Add(time.Hour), Actor: "uid:1000"}},
		{name: "fail/consumed", fsm: admitFixture, cmd: RevokeToken{Hash: secret(9).Hash(), At: t0}, want: codes.TokenConsumed},
		{name: "fail/consumed-by-removed-node", fsm: admitFixture, cmd: RevokeToken{Hash: secret(5).Hash(), At: t0}, want: codes.TokenConsumed},
		{name: "fail/unknown", fsm: admitFixture, cmd: RevokeToken{Hash: secret(77).Hash(), At: t0}, want: codes.TokenUnknown},
		{name: "fail/no-time", fsm: admitFixture, cmd: RevokeToken{Hash: secret(1).Hash()}, want: codes.BadRequest},
		{name: "fail/no-cluster", fsm: func(*testing.T) *FSM { return New() },
			cmd: RevokeToken{Hash: secret(1).Hash(), At: t0}, want: codes.NotInCluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fsm(t)
			before := stateBytes(t, f)
			audit := len(f.Audit())
			err := apply(t, f, tc.cmd)
			if codes.Of(err) != tc.want || (tc.want == "" && err != nil) {
				t.Fatalf("apply: %v (code %q), want code %q", err, codes.Of(err), tc.want)
			}
			if changed := !bytes.Equal(before, stateBytes(t, f)); changed != tc.changed {
				t.Fatalf("state changed = %v, want %v", changed, tc.changed)
			}
			if !tc.changed {
				return
			}
			rec, _ := f.Token(tc.cmd.Hash)
			if !rec.RevokedAt.Equal(tc.cmd.At) || rec.RevokedBy != tc.cmd.Actor {
				t.Fatalf("record %+v, want revoked at %v by %q", rec, tc.cmd.At, tc.cmd.Actor)
			}
			if len(f.Audit()) != audit+1 {
				t.Fatalf("%d audit events, want %d", len(f.Audit()), audit+1)
			}
		})
	}
	// The repeat left the first revocation's time and actor.
	f := revokeFixture(t)
	mustApply(t, f, RevokeToken{Hash: secret(1).Hash(), At: t0.Add(time.Hour), Actor: "uid:1000"})
	if rec, _ := f.Token(secret(1).Hash()); !rec.RevokedAt.Equal(t0.Add(30*time.Second)) || rec.RevokedBy != "uid:0" {
		t.Fatalf("a repeated revocation rewrote the record: %+v", rec)
	}
}

// TestMintRevokedRecord: a minted record cannot arrive revoked.
func TestMintRevokedRecord(t *testing.T) {
	f := bootstrapped(t)
	for name, edit := range map[string]func(*enroll.TokenRecord){
		"revoked-at": func(r *enroll.TokenRecord) { r.RevokedAt = t0 },
		"revoked-by": func(r *enroll.TokenRecord) { r.RevokedBy = "uid:0" },
	} {
		t.Run(name, func(t *testing.T) {
			r := tokenRecord(1, "w1", pki.RoleWorker)
			edit(&r)
			before := stateBytes(t, f)
			if got := codes.Of(apply(t, f, MintToken{Record: r})); got != codes.BadRequest {
				t.Fatalf("code %q, want %q", got, codes.BadRequest)
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("refused mint changed the state")
			}
		})
	}
}

// pruneFixture has one token of each kind on each side of the cut-off
// t0+1h, named for what the prune must do with it.
func pruneFixture(t *testing.T) (*FSM, time.Time) {
	t.Helper()
	cut := t0.Add(time.Hour)
	f := bootstrapped(t)
	ip := byte(10)
	mint := func(seed byte, name string, created time.Time) {
		r := tokenRecord(seed, name, pki.RoleWorker)
		r.Created, r.Expires = created, created.Add(enroll.DefaultTTL)
		mustApply(t, f, MintToken{Record: r})
	}
	use := func(seed byte, name string, at time.Time) {
		ip++
		c := admitCmd(seed, "n-"+name, name, pki.RoleWorker, fmt.Sprintf("10.42.0.%d", ip))
		c.Admission.At = at
		mustApply(t, f, c)
	}
	// Used: the record ends at its use.
	mint(1, "drop-used", t0)
	use(1, "drop-used", t0.Add(time.Minute))
	mint(2, "keep-used-at-cut", cut.Add(-10*time.Minute))
	use(2, "keep-used-at-cut", cut)
	mint(3, "keep-used-late", cut.Add(-time.Minute))
	use(3, "keep-used-late", cut.Add(time.Second))
	// Revoked: it ends at its revocation.
	mint(4, "drop-revoked", t0)
	mustApply(t, f, RevokeToken{Hash: secret(4).Hash(), At: cut.Add(-time.Nanosecond)})
	mint(5, "keep-revoked", t0)
	mustApply(t, f, RevokeToken{Hash: secret(5).Hash(), At: cut})
	// Unused: it ends when it expires.
	mint(6, "drop-expired", cut.Add(-enroll.DefaultTTL-time.Second))
	mint(7, "keep-expired-at-cut", cut.Add(-enroll.DefaultTTL))
	mint(8, "keep-expired-late", cut.Add(-enroll.DefaultTTL+time.Second))
	mint(9, "keep-unused", cut.Add(time.Minute))
	return f, cut
}

func tokenNames(f *FSM) []string {
	var out []string
	for _, r := range f.Tokens() {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

// TestPruneTokens: PruneTokens removes exactly the used, revoked and
// expired records that ended before the cut-off, nothing else of the
// state, and two FSMs fed the same entries end in the same state.
func TestPruneTokens(t *testing.T) {
	f, cut := pruneFixture(t)
	twin, _ := pruneFixture(t)
	nodes, ipam, audit := f.Nodes(), f.snapshot().IPAM, f.Audit()

	cmd := PruneTokens{Before: cut, At: cut.Add(24 * time.Hour), Actor: originID}
	mustApply(t, f, cmd)
	mustApply(t, twin, cmd)

	want := []string{"keep-expired-at-cut", "keep-expired-late", "keep-revoked", "keep-unused", "keep-used-at-cut", "keep-used-late"}
	if got := tokenNames(f); !slices.Equal(got, want) {
		t.Fatalf("tokens after the prune %q, want %q", got, want)
	}
	if !bytes.Equal(stateBytes(t, f), stateBytes(t, twin)) {
		t.Fatal("two FSMs pruned to different states")
	}
	after := f.snapshot()
	if fmt.Sprint(f.Nodes()) != fmt.Sprint(nodes) || !maps.Equal(after.IPAM, ipam) {
		t.Fatal("the prune changed nodes or allocations")
	}
	// The audit ring gains one event, by the command's actor.
	got := f.Audit()
	if len(got) != len(audit)+1 || fmt.Sprint(got[:len(audit)]) != fmt.Sprint(audit) {
		t.Fatalf("audit after the prune: %d events, want %d and the old ones kept", len(got), len(audit)+1)
	}
	if e := got[len(got)-1]; e.Code != codes.EventTokensPruned || e.Actor != originID || !e.At.Equal(cmd.At) ||
		!strings.HasPrefix(e.Detail, "3 token records") {
		t.Fatalf("the prune's audit event %+v", e)
	}
	// A second prune at the same cut-off finds nothing more, and records
	// nothing.
	before := stateBytes(t, f)
	mustApply(t, f, cmd)
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a repeated prune changed the state")
	}
	// A pruned token is gone: joining with it is TokenUnknown.
	use := admitCmd(1, "n-again", "drop-used", pki.RoleWorker, "10.42.0.99")
	if got := codes.Of(apply(t, f, use)); got != codes.TokenUnknown {
		t.Fatalf("admit with a pruned token: code %q, want %q", got, codes.TokenUnknown)
	}
}

// TestPruneNeverTakesAUsableToken: whatever the cut-off, a token that is
// unused, unrevoked and unexpired at the command's At survives.
func TestPruneNeverTakesAUsableToken(t *testing.T) {
	f := bootstrapped(t)
	live := tokenRecord(1, "w1", pki.RoleWorker) // t0 .. t0+15m
	mustApply(t, f, MintToken{Record: live})
	for _, at := range []time.Time{t0, t0.Add(time.Minute), live.Expires.Add(-time.Nanosecond)} {
		for _, before := range []time.Time{at.Add(-time.Nanosecond), at.Add(-time.Hour), at.Add(-24 * time.Hour)} {
			mustApply(t, f, PruneTokens{Before: before, At: at})
			if _, ok := f.Token(live.Hash); !ok {
				t.Fatalf("PruneTokens{Before: %v, At: %v} removed a token usable until %v", before, at, live.Expires)
			}
		}
	}
}

func TestPruneTokensRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  PruneTokens
	}{
		{"fail/no-cut-off", PruneTokens{At: t0}},
		{"fail/nothing-at-all", PruneTokens{}},
		{"fail/cut-off-now", PruneTokens{Before: t0, At: t0}},
		{"fail/cut-off-in-the-future", PruneTokens{Before: t0.Add(time.Second), At: t0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := pruneFixture(t)
			before := stateBytes(t, f)
			if got := codes.Of(apply(t, f, tc.cmd)); got != codes.BadRequest {
				t.Fatalf("code %q, want %q", got, codes.BadRequest)
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("a refused prune changed the state")
			}
		})
	}
}

func TestEndedAndPrunable(t *testing.T) {
	r := tokenRecord(1, "w1", pki.RoleWorker)
	used, revoked := r, r
	used.ConsumedAt, used.ConsumedBy = t0.Add(time.Minute), "n-w1"
	revoked.RevokedAt = t0.Add(2 * time.Minute)
	for _, tc := range []struct {
		name string
		r    enroll.TokenRecord
		end  time.Time
	}{
		{"unused", r, r.Expires},
		{"used", used, used.ConsumedAt},
		{"revoked", revoked, revoked.RevokedAt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ended(tc.r); !got.Equal(tc.end) {
				t.Fatalf("Ended = %v, want %v", got, tc.end)
			}
			if Prunable(tc.r, tc.end) {
				t.Fatal("prunable at the instant it ended")
			}
			if !Prunable(tc.r, tc.end.Add(time.Nanosecond)) {
				t.Fatal("not prunable just after it ended")
			}
		})
	}
}

// TestSnapshotKeepsRevocation: a revoked token is still revoked in a
// restored FSM, which still refuses it; the frozen v1 snapshot, written
// before tokens could be revoked, decodes with every RevokedAt zero.
func TestSnapshotKeepsRevocation(t *testing.T) {
	f := revokeFixture(t)
	fresh := New()
	if err := fresh.Restore(persist(t, f)); err != nil {
		t.Fatal(err)
	}
	want, _ := f.Token(secret(1).Hash())
	got, ok := fresh.Token(secret(1).Hash())
	if !ok || !got.RevokedAt.Equal(want.RevokedAt) || got.RevokedBy != want.RevokedBy || !got.Revoked() {
		t.Fatalf("restored record %+v, want %+v", got, want)
	}
	if c := codes.Of(apply(t, fresh, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))); c != codes.TokenRevoked {
		t.Fatalf("restored FSM admits a revoked token: code %q", c)
	}

	old := New()
	if err := old.Restore(io.NopCloser(bytes.NewReader(readGolden(t, goldenV1)))); err != nil {
		t.Fatalf("the frozen v1 snapshot no longer restores: %v", err)
	}
	toks := old.Tokens()
	if len(toks) != 3 {
		t.Fatalf("v1 snapshot holds %d tokens, want 3", len(toks))
	}
	for _, r := range toks {
		if r.Revoked() || !r.RevokedAt.IsZero() || r.RevokedBy != "" {
			t.Fatalf("v1 token %s decodes revoked: %+v", r.Name, r)
		}
	}
	// An open token of the v1 state can be revoked after the upgrade.
	mustApply(t, old, RevokeToken{Hash: secret(3).Hash(), At: t0.Add(3 * time.Minute)})
	if r, _ := old.Token(secret(3).Hash()); !r.Revoked() {
		t.Fatal("revocation of a v1 token did not take")
	}
}
