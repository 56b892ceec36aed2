package member

import (
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/pki"
)

// countedListFacts is a node list whose reads are counted.
type countedListFacts struct {
	listFacts
	reads atomic.Int64
}

func (f *countedListFacts) Records() ([]control.NodeRecord, bool) {
	f.reads.Add(1)
	return f.listFacts.Records()
}

// TestPairTargetsIndex (issue 54): pair health's targets are built once
// per change, not per round: with nothing changed, a round gets the same
// targets from one look at the node list and no copy of the gossip
// members; a new node list (a record added), a gossip change (b leaves)
// and the evidence about b (its probe fails) each bring the targets up to
// date at the next round: b, gossiping and on record, is a target; c, on
// record but not in gossip, is not; b gone from gossip is not.
func TestPairTargetsIndex(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	a, aIP := startTaggedGossip(t, "a", key)
	b, bIP := startTaggedGossip(t, "b", key)
	if n, err := b.Join(t.Context(), []string{net.JoinHostPort(aIP.String(), strconv.Itoa(forgedViewPort))}); err != nil || n != 1 {
		t.Fatalf("b joins a: %d, %v", n, err)
	}
	record := func(name string, ip netip.Addr) control.NodeRecord {
		return control.NodeRecord{Node: apitype.Node{ID: "id-" + name, Name: name, Role: string(pki.RoleWorker),
			State: "active", OverlayIP: ip.String()}, SerfAddr: ":" + strconv.Itoa(forgedViewPort)}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	facts := &countedListFacts{listFacts: listFacts{list: []control.NodeRecord{record("a", aIP), record("b", bIP)}}}
	nd := &node{cluster: facts, log: log,
		facts:    &statedir.Facts{NodeID: "id-a", Name: "a", Overlay: netip.PrefixFrom(aIP, 8)},
		ports:    config.Ports{Gossip: forgedViewPort},
		gossip:   a,
		standing: fetched.NewStanding(time.Now, log)}
	ms := &membership{node: nd, ov: &overlay{node: nd}, keys: &keyring{node: nd},
		evidence: newEvidence(nd.gossipListens, 2*time.Second, time.Now, log)}
	t.Cleanup(ms.evidence.close)
	rt := &Runtime{node: nd, members: ms}
	names := func(ts []pairTarget) []string {
		var out []string
		for _, tg := range ts {
			out = append(out, tg.name)
		}
		return out
	}
	waitUntil(t, 5*time.Second, "a's targets are b", func() bool { return slices.Equal(names(rt.pairTargets()), []string{"b"}) })

	builds, reads, copies := rt.pairIdx.builds, facts.reads.Load(), a.Copies()
	first := rt.pairTargets()
	for range 100 {
		if got := rt.pairTargets(); len(got) != len(first) || &got[0] != &first[0] {
			t.Fatalf("targets %v: not the same slice with nothing changed", names(got))
		}
	}
	if got := rt.pairIdx.builds - builds; got != 0 {
		t.Fatalf("101 rounds with nothing changed built the targets %d times, want 0", got)
	}
	if got := facts.reads.Load() - reads; got != 101 {
		t.Errorf("101 rounds looked at the node list %d times, want once each (its identity)", got)
	}
	if got := a.Copies() - copies; got != 0 {
		t.Errorf("101 rounds copied the gossip members %d times, want 0", got)
	}

	cIP := netip.MustParseAddr("127.82.255.254") // on record, never in gossip
	facts.list = append(slices.Clone(facts.list), record("c", cIP))
	builds = rt.pairIdx.builds
	if got := names(rt.pairTargets()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("with c on record and not in gossip: targets %v, want [b]", got)
	}
	if rt.pairIdx.builds != builds+1 {
		t.Fatalf("a new node list: %d builds, want 1", rt.pairIdx.builds-builds)
	}

	if err := b.Shutdown(); err != nil { // no leave: a's gossip finds b failed, its probe of b's gossip port fails
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "b dropped from a's targets", func() bool { return len(rt.pairTargets()) == 0 })
}
