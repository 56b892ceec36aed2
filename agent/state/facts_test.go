package state

import (
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
)

// TestSetFacts: one entry records a batch; an empty field keeps the
// record's; a node that is not active, or unknown, is skipped while the
// rest applies; the same report again changes nothing; Updated does not
// move; a snapshot carries the fields.
func TestSetFacts(t *testing.T) {
	f := bootstrapped(t)
	for i, name := range []string{"w1", "w2", "w3"} {
		seed := byte(i + 1)
		mustApply(t, f, MintToken{Record: tokenRecord(seed, name, pki.RoleWorker)})
		mustApply(t, f, admitCmd(seed, "n-"+name, name, pki.RoleWorker, "10.42.0."+string(rune('5'+i))))
	}
	mustApply(t, f, SetNodeState{NodeID: "n-w3", State: NodeLeft, At: t0.Add(time.Hour)})
	before, _ := f.Node("n-w1")

	mustApply(t, f, SetFacts{Changes: []FactChange{
		{NodeID: "n-w1", Version: "v2", CA: "a.b.c", CASig: []byte("sig1")},
		{NodeID: "n-w2", Version: "v2"},
		{NodeID: "n-w3", Version: "v2", CA: "a.b.c", CASig: []byte("sig3")},
		{NodeID: "n-nobody", Version: "v2"}}, Actor: "node:" + originID})
	w1, _ := f.Node("n-w1")
	if w1.RunsVersion != "v2" || w1.CAReport != "a.b.c" || string(w1.CAReportSig) != "sig1" || !w1.Updated.Equal(before.Updated) {
		t.Fatalf("w1 = %q %q %q updated %v; want v2, a.b.c, sig1, updated unchanged (%v)",
			w1.RunsVersion, w1.CAReport, w1.CAReportSig, w1.Updated, before.Updated)
	}
	if w2, _ := f.Node("n-w2"); w2.RunsVersion != "v2" || w2.CAReport != "" {
		t.Errorf("w2 = %q %q, want v2 and no CA report", w2.RunsVersion, w2.CAReport)
	}
	if w3, _ := f.Node("n-w3"); w3.RunsVersion != "" || w3.CAReport != "" {
		t.Errorf("a left node took facts: %q %q", w3.RunsVersion, w3.CAReport)
	}
	if !(FactChange{NodeID: "n-w1", Version: "v2", CA: "a.b.c", CASig: []byte("sig1")}).Holds(w1) ||
		!(FactChange{NodeID: "n-w1", CA: "a.b.c", CASig: []byte("another signature")}).Holds(w1) ||
		(FactChange{NodeID: "n-w1", CA: "a.b.d", CASig: []byte("sig1")}).Holds(w1) {
		t.Error("Holds: wrong answer")
	}

	// A CA report alone keeps the version; the same again changes nothing.
	mustApply(t, f, SetFacts{Changes: []FactChange{{NodeID: "n-w1", CA: "d.e.f", CASig: []byte("sig2")}}})
	if w1, _ = f.Node("n-w1"); w1.RunsVersion != "v2" || w1.CAReport != "d.e.f" {
		t.Errorf("w1 = %q %q, want v2 d.e.f", w1.RunsVersion, w1.CAReport)
	}
	was := stateBytes(t, f)
	mustApply(t, f, SetFacts{Changes: []FactChange{{NodeID: "n-w1", CA: "d.e.f", CASig: []byte("sig2")}}})
	if string(stateBytes(t, f)) != string(was) {
		t.Error("the same report again changed the state")
	}

	fresh := New()
	if err := fresh.Restore(persist(t, f)); err != nil {
		t.Fatal(err)
	}
	if n, _ := fresh.Node("n-w1"); n.RunsVersion != "v2" || n.CAReport != "d.e.f" || string(n.CAReportSig) != "sig2" {
		t.Errorf("restored w1 = %q %q %q", n.RunsVersion, n.CAReport, n.CAReportSig)
	}
}

// TestSetFactsOutOfPool: a worker out of the gossip pool reports its NAT,
// that it is out of the pool, and the revocation list version it blocks;
// the version only moves forward (a late batch does not take it back);
// PoolIn takes the flag back; Holds answers for each field; a snapshot
// carries them.
func TestSetFactsOutOfPool(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.5"))

	mustApply(t, f, SetFacts{Changes: []FactChange{{NodeID: "n-w1", NAT: "sym", Pool: PoolOut, Revoked: 7}}})
	w1, _ := f.Node("n-w1")
	if w1.NAT != "sym" || !w1.OutOfPool || w1.RevokedApplied != 7 {
		t.Fatalf("w1 = nat %q out %v revoked %d; want sym, true, 7", w1.NAT, w1.OutOfPool, w1.RevokedApplied)
	}
	mustApply(t, f, SetFacts{Changes: []FactChange{{NodeID: "n-w1", Revoked: 5}}})
	if w1, _ = f.Node("n-w1"); w1.RevokedApplied != 7 || w1.NAT != "sym" || !w1.OutOfPool {
		t.Fatalf("a late report took the version back to %d (or cleared a field: %q %v)", w1.RevokedApplied, w1.NAT, w1.OutOfPool)
	}
	for _, c := range []struct {
		ch   FactChange
		want bool
	}{
		{FactChange{NAT: "sym", Pool: PoolOut, Revoked: 7}, true},
		{FactChange{Revoked: 6}, true},
		{FactChange{Revoked: 8}, false},
		{FactChange{NAT: "open"}, false},
		{FactChange{Pool: PoolIn}, false},
	} {
		if got := c.ch.Holds(w1); got != c.want {
			t.Errorf("Holds(%+v) = %v, want %v", c.ch, got, c.want)
		}
	}
	fresh := New()
	if err := fresh.Restore(persist(t, f)); err != nil {
		t.Fatal(err)
	}
	if n, _ := fresh.Node("n-w1"); n.NAT != "sym" || !n.OutOfPool || n.RevokedApplied != 7 {
		t.Errorf("restored w1 = %q %v %d", n.NAT, n.OutOfPool, n.RevokedApplied)
	}
	mustApply(t, f, SetFacts{Changes: []FactChange{{NodeID: "n-w1", Pool: PoolIn}}})
	if w1, _ = f.Node("n-w1"); w1.OutOfPool {
		t.Error("PoolIn left the node out of the pool")
	}
}
