package fetched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshd/meshd/agent/control"
)

// workerJSON is a worker's record as the watch carries it.
func workerJSON(name string, port int) string {
	return fmt.Sprintf(`{"name":%q,"role":"worker","state":"active","ip":"10.42.1.2","ul":"192.0.2.1:%d"}`, name, port)
}

// TestDeltasKeepTheListSorted: after any sequence of deltas (records
// added, renamed, changed, deleted), the list a worker adopts is every
// decoded record in recordOrder, as sorting them all again gives it, and
// a list adopted earlier is left as it was (it is shared). The list is
// asked for after every delta, every 7th and every 40th (the build merges
// the records changed since the last: one, a few or many).
func TestDeltasKeepTheListSorted(t *testing.T) {
	for _, every := range []int{1, 7, 40} {
		t.Run(fmt.Sprintf("every=%d", every), func(t *testing.T) { testDeltasKeepTheListSorted(t, every) })
	}
}

func testDeltasKeepTheListSorted(t *testing.T, every int) {
	c := newTestCopies(t)
	first := map[string]string{"id-w1": workerJSON("w1", 4242)}
	for i := range 50 {
		first[fmt.Sprintf("id-%d", i)] = workerJSON(fmt.Sprintf("n%02d", i), 4242)
	}
	if _, err := c.applyChange(nodesChange(1, true, first), 0); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for step := range 300 {
		ch := nodesChange(uint64(step+2), false, nil)
		for range 1 + rnd.IntN(3) {
			id := fmt.Sprintf("id-%d", rnd.IntN(80))
			switch rnd.IntN(3) {
			case 0: // put: new, renamed or changed
				ch.Put[control.SectionNodes][id] = []byte(workerJSON(fmt.Sprintf("n%02d", rnd.IntN(80)), 4000+rnd.IntN(100)))
			case 1:
				if ch.Del == nil {
					ch.Del = map[string][]string{}
				}
				if _, put := ch.Put[control.SectionNodes][id]; !put {
					ch.Del[control.SectionNodes] = append(ch.Del[control.SectionNodes], id)
				}
			case 2: // nothing for this id
			}
		}
		before, _ := c.Records()
		kept := slices.Clone(before)
		if _, err := c.applyChange(ch, 0); err != nil {
			t.Fatal(err)
		}
		if step%every != 0 {
			continue
		}
		got, _ := c.Records()
		c.nodes.mu.Lock()
		want := sortedRecords(c.nodes.recs)
		c.nodes.mu.Unlock()
		if !slices.EqualFunc(got, want, sameRecord) {
			t.Fatalf("step %d: the list after a delta is not the records sorted:\n got %v\nwant %v", step, names(got), names(want))
		}
		if !slices.EqualFunc(before, kept, sameRecord) {
			t.Fatalf("step %d: a delta wrote into the list adopted before it", step)
		}
	}
}

func names(l []control.NodeRecord) []string {
	var out []string
	for _, r := range l {
		out = append(out, r.Name+"/"+r.ID)
	}
	return out
}

// BenchmarkApplyOneChange is a worker's watch copy's share of one
// membership change (a peer moved to another port) at 1,000 and 10,000
// records: decoding the line, the list in order, the revocations' view.
func BenchmarkApplyOneChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			c := newTestCopies(b)
			first := map[string]string{"id-w1": workerJSON("w1", 4242)}
			for i := range n - 1 {
				first[fmt.Sprintf("id-%d", i)] = workerJSON(fmt.Sprintf("n%05d", i), 4242)
			}
			if _, err := c.applyChange(nodesChange(1, true, first), 0); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				ch := nodesChange(uint64(i+2), false, map[string]string{"id-7": workerJSON("n00007", 5000+i%1000)})
				if _, err := c.applyChange(ch, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListAfterChanges is the list in order built after 40 changes
// (peers moved) at 10,000 records: what pair health's round pays every
// 10 s during churn of 4 changes a second (member.BenchmarkWorkerSim).
func BenchmarkListAfterChanges(b *testing.B) {
	const n, k = 10000, 40
	c := newTestCopies(b)
	first := map[string]string{"id-w1": workerJSON("w1", 4242)}
	for i := range n - 1 {
		first[fmt.Sprintf("id-%d", i)] = workerJSON(fmt.Sprintf("n%05d", i), 4242)
	}
	if _, err := c.applyChange(nodesChange(1, true, first), 0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	v := uint64(2)
	for i := range b.N {
		b.StopTimer()
		for j := range k {
			id := (i*k + j) * 97 % (n - 1)
			ch := nodesChange(v, false, map[string]string{fmt.Sprintf("id-%d", id): workerJSON(fmt.Sprintf("n%05d", id), 5000+j)})
			v++
			if _, err := c.applyChange(ch, 0); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if l, _ := c.Records(); len(l) != n {
			b.Fatalf("%d records, want %d", len(l), n)
		}
	}
}
