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
