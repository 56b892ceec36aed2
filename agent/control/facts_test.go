package control

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// signedFacts is name's report of version and ca, signed with its key.
func (c *testCluster) signedFacts(t testing.TB, name, version, ca string) FactsRequest {
	return FactsRequest{Version: version, CA: ca, CASig: c.attest(t, name, pki.AttestCA, []byte("id-"+name), CAStatement(ca))}
}

func (b *factBatch) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.writes
}

// TestSelfFacts: a worker's POST PathSelfFacts to a follower is written
// on the leader's record, for the caller only (the body names no node:
// a report signed by another node's key is refused); a CA report not
// signed by the caller's recorded key is refused with FactsRefused and
// nothing is written; the same report again writes nothing; the node
// list shows the version from raft though gossip says another.
func TestSelfFacts(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	_, w1 := c.worker(t, origin, "w1")
	_, w2 := c.worker(t, origin, "w2")
	ctx := within(t, 20*time.Second)
	waitState(t, c2, "id-w2", state.NodeActive)
	origin.hooks.mu.Lock()
	origin.hooks.versions = map[string]string{"w1": "v-gossip"}
	origin.hooks.mu.Unlock()

	if err := w1.Call(ctx, c2.addr, PathSelfFacts, false, c.signedFacts(t, "w1", "v2.0.0", "b1.t1.n1"), nil); err != nil {
		t.Fatalf("w1 reports through c2: %v", err)
	}
	waitFor(t, 5*time.Second, "origin records w1's facts", func() bool {
		n, _ := origin.p.Raft().FSM().Node("id-w1")
		return n.RunsVersion == "v2.0.0" && n.CAReport == "b1.t1.n1" && len(n.CAReportSig) > 0
	})
	for _, r := range origin.p.nodeRows() {
		if r.Name == "w1" && r.Version != "v2.0.0" {
			t.Errorf("node list shows w1 running %q, want raft's v2.0.0 over gossip's", r.Version)
		}
	}

	writes := c2.p.facts.count()
	refused := []struct {
		name string
		cl   *Client
		req  FactsRequest
	}{
		{"w2 sends w1's signed report", w2, c.signedFacts(t, "w1", "v3", "b2.t2.n2")},
		{"w1's report of another statement", w1, FactsRequest{Version: "v3", CA: "b2.t2.n2",
			CASig: c.attest(t, "w1", pki.AttestCA, []byte("id-w1"), CAStatement("b9.t9.n9"))}},
		{"w1's report bound to another node", w1, FactsRequest{Version: "v3", CA: "b2.t2.n2",
			CASig: c.attest(t, "w1", pki.AttestCA, []byte("id-w2"), CAStatement("b2.t2.n2"))}},
		{"w1 unsigned", w1, FactsRequest{Version: "v3", CA: "b2.t2.n2"}},
	}
	for _, tc := range refused {
		if err := tc.cl.Call(ctx, c2.addr, PathSelfFacts, false, tc.req, nil); codes.Of(err) != codes.FactsRefused {
			t.Errorf("%s: %v, want %s", tc.name, err, codes.FactsRefused)
		}
	}
	// The same report again is taken without a write.
	if err := w1.Call(ctx, c2.addr, PathSelfFacts, false, c.signedFacts(t, "w1", "v2.0.0", "b1.t1.n1"), nil); err != nil {
		t.Fatal(err)
	}
	if got := c2.p.facts.count(); got != writes {
		t.Errorf("refused and unchanged reports made %d raft writes, want none", got-writes)
	}
	if err := origin.p.SyncRead(ctx); err != nil {
		t.Fatal(err)
	}
	w1n, _ := origin.p.Raft().FSM().Node("id-w1")
	w2n, _ := origin.p.Raft().FSM().Node("id-w2")
	if w1n.RunsVersion != "v2.0.0" || w1n.CAReport != "b1.t1.n1" || w2n.RunsVersion != "" || w2n.CAReport != "" {
		t.Errorf("after the refusals: w1 %q %q, w2 %q %q", w1n.RunsVersion, w1n.CAReport, w2n.RunsVersion, w2n.CAReport)
	}
}

// TestSelfFactsBatch: reports that reach a control node within one
// window are one raft entry, forwarded from a follower to the leader.
func TestSelfFactsBatch(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	names := []string{"w1", "w2", "w3", "w4", "w5", "w6"}
	clients := make([]*Client, len(names))
	for i, name := range names {
		_, clients[i] = c.worker(t, origin, name)
	}
	ctx := within(t, 20*time.Second)
	waitState(t, c2, "id-w6", state.NodeActive)
	for _, cl := range clients { // connections up, so the reports arrive together
		if err := cl.Call(ctx, c2.addr, PathSelfFacts, false, FactsRequest{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	writes, entries := c2.p.facts.count(), origin.p.Raft().FSM().Index()
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Go(func() {
			errs[i] = clients[i].Call(ctx, c2.addr, PathSelfFacts, false, c.signedFacts(t, name, "v2", "b.t."+name), nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
	}
	if got := c2.p.facts.count() - writes; got != 1 {
		t.Errorf("%d reports in one window made %d raft writes, want 1", len(names), got)
	}
	for _, name := range names {
		if n, _ := origin.p.Raft().FSM().Node("id-" + name); n.CAReport != "b.t."+name {
			t.Errorf("%s: CA report %q on the leader", name, n.CAReport)
		}
	}
	t.Logf("%d reports: %d raft entries on the leader (its index moved by that, plus any background write)",
		len(names), origin.p.Raft().FSM().Index()-entries)
}

// TestRotationOnRaftFacts: a CA rotation runs to its end on the members'
// reports in raft alone (SetFacts), with no gossip report at all (the
// harness's gossip reports nothing): the gate waits while a member has
// reported nothing, and passes once each reports what it runs.
func TestRotationOnRaftFacts(t *testing.T) {
	c, origin := newCluster(t)
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	runs := runsRecord(origin)
	report := func(ctx context.Context) {
		for _, r := range runs() {
			if _, ok := origin.p.Raft().FSM().Node(r.ID); !ok {
				continue // runsRecord names c2, which this cluster has not
			}
			if err := origin.p.reportFacts(ctx, r.ID, c.signedFacts(t, r.Name, "v2", r.CA)); err != nil {
				t.Fatalf("%s reports: %v", r.Name, err)
			}
		}
	}

	next := pkitest.NewCA(t, "alpha")
	_, err := origin.p.RotateCA(within(t, 10*time.Second), next, true, "uid:0")
	if codes.Of(err) != codes.CARotationStalled {
		t.Fatalf("rotation with no report at all: %v, want %s", err, codes.CARotationStalled)
	}
	cl, _ := origin.p.Raft().FSM().Cluster()
	if got := origin.p.caLaggers(cl); !slices.Contains(got, "w1 (no report)") {
		t.Fatalf("laggers %q, want w1 (no report)", got)
	}
	report(within(t, 10*time.Second)) // the trust bundles adopted
	st, err := origin.p.RotateCA(within(t, 15*time.Second), nil, true, "uid:0")
	if err != nil || st.Phase != "reissue" {
		t.Fatalf("rotation on raft's reports: %+v, %v; want phase reissue", st, err)
	}
	report(within(t, 10*time.Second)) // the reissued certificates run
	waitFor(t, 10*time.Second, "the rotation finishes", func() bool {
		done, err := origin.p.FinishCARotation(within(t, 5*time.Second), "")
		return err == nil && done
	})
	if n, _ := origin.p.Raft().FSM().Node("id-w1"); n.CAReport == "" {
		t.Error("w1's report is not in raft")
	}
}

// BenchmarkCheckFact is one report's signature check (checkFact), which
// the control node that takes a report pays and the leader again for a
// forwarded batch: 10,000 of each per step of a CA rotation at 10,000
// members.
//
//	go test -run '^$' -bench BenchmarkCheckFact ./agent/control
func BenchmarkCheckFact(b *testing.B) {
	ca := pkitest.NewCA(b, "prod")
	id := pkitest.NewIdentity(b, ca, "w1", pki.RoleWorker, pkitest.IP(5))
	pub, err := pki.PublicKeyDER(id.Cert)
	if err != nil {
		b.Fatal(err)
	}
	n := state.Node{ID: "id-w1", Name: "w1", TLSPublicKey: pub}
	rep := "0123abcd.4567ef01.89abcdef"
	sig, err := id.Attest(pki.AttestCA, []byte(n.ID), CAStatement(rep))
	if err != nil {
		b.Fatal(err)
	}
	ch := state.FactChange{NodeID: n.ID, CA: rep, CASig: sig}
	b.ResetTimer()
	for range b.N {
		if err := checkFact(n, ch); err != nil {
			b.Fatal(err)
		}
	}
}
