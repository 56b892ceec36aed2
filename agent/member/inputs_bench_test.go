package member

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// BenchmarkOverlayInputs is the part of a worker's overlay pass that
// BenchmarkOverlayOneChange leaves out: overlayInputs reading n node
// records from the cluster's facts (a worker's node list, here as a
// slice already built) into desired's records, with no gossip members.
// It is O(n) per pass whatever changed (issue 54 item 2: not done).
func BenchmarkOverlayInputs(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ca := pkitest.NewCA(b, "bench")
			live, err := pki.NewLiveIdentity(pkitest.NewIdentity(b, ca, "self", pki.RoleWorker, pkitest.IP(254)))
			if err != nil {
				b.Fatal(err)
			}
			facts := &statedir.Facts{NodeID: "id-self", Name: "self", Role: pki.RoleWorker, Overlay: pkitest.IP(254)}
			recs := make([]control.NodeRecord, n)
			for i := range recs {
				r := benchRecord(i)
				recs[i] = control.NodeRecord{Node: apitype.Node{Name: r.Name, ID: r.ID, Role: string(r.Role), State: "active",
					OverlayIP: r.Overlay.String(), Underlay: r.Underlay.Addr().String()}, NebulaPort: 4242,
					SerfAddr: r.Overlay.String() + ":7946"}
			}
			nd := &node{log: slog.New(slog.DiscardHandler), live: live, facts: facts, cluster: nodeListFacts{recs: recs}}
			b.ReportAllocs()
			for b.Loop() {
				in := nd.overlayInputs()
				if len(in.Records) != n {
					b.Fatalf("%d records, want %d", len(in.Records), n)
				}
			}
		})
	}
}

// nodeListFacts are cluster facts with a node list and nothing else.
type nodeListFacts struct {
	clusterFacts
	recs []control.NodeRecord
}

func (f nodeListFacts) Records() ([]control.NodeRecord, bool) { return f.recs, true }
func (f nodeListFacts) Revocations() control.Revocations      { return control.Revocations{} }
func (f nodeListFacts) Record(id string) (control.NodeRecord, bool) {
	return findRecord(f.recs, id)
}
func (f nodeListFacts) Seeds() []string { return nil }
