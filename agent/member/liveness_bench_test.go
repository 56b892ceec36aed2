package member

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/pki"
)

// BenchmarkRecordLiveness: what the record-fed liveness source costs at
// 10,000 members. "verdict" is one record's Unheard set and read
// (RecordsSince, the member brought up to date, Changes rung): its cost
// must not grow with the members. "members" is Members
// again with nothing changed (a copy of the slice: the members are kept
// between changes), "members-after-verdict" one verdict and the copy a
// reader then makes (every member built again: O(members) a change, as
// gossip's Members costs at each call).
func BenchmarkRecordLiveness(b *testing.B) {
	const n = 10000
	recs := make([]control.NodeRecord, 0, n)
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 42, byte(1 + i/250), byte(1 + i%250)})
		recs = append(recs, taggedRecord(fmt.Sprintf("p%05d", i), pki.RoleWorker, ip))
	}
	facts := newLogFacts(recs...)
	l := newRecordLiveness(facts, nil, "id-p00000", time.Now)
	l.sync()
	facts.logOnly = true
	b.Run("verdict", func(b *testing.B) {
		i := 0
		for b.Loop() {
			r := recs[1+i%(n-1)]
			if r.Unheard.IsZero() {
				r.Unheard = time.Unix(int64(1e9+i), 0)
			} else {
				r.Unheard = time.Time{}
			}
			recs[1+i%(n-1)] = r
			facts.set(r) // the node list's own part: a log entry
			l.sync()
			i++
		}
		b.ReportMetric(float64(n), "members")
	})
	b.Run("members", func(b *testing.B) {
		for b.Loop() {
			_ = l.Members()
		}
		b.ReportMetric(float64(n), "members")
	})
	b.Run("members-after-verdict", func(b *testing.B) {
		i := 0
		for b.Loop() {
			r := recs[1+i%(n-1)]
			r.Unheard = time.Unix(int64(2e9+i), 0)
			facts.set(r)
			_ = l.Members()
			i++
		}
		b.ReportMetric(float64(n), "members")
	})
}
