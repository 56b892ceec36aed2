package fetched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/control"
)

// TestRecordsSinceFollowsTheList: a consumer that keeps the records
// RecordsSince hands it (the changed ones, or the whole list when it fell
// behind the log) holds the list's records after any sequence of deltas,
// whether it asks after every change, after a few, or after more than
// the log holds; and a delta alone builds no list (the copy per change
// issue 54 removed).
func TestRecordsSinceFollowsTheList(t *testing.T) {
	c := newTestCopies(t)
	first := map[string]string{"id-w1": workerJSON("w1", 4242)}
	for i := range 50 {
		first[fmt.Sprintf("id-%d", i)] = workerJSON(fmt.Sprintf("n%02d", i), 4242)
	}
	if _, err := c.applyChange(nodesChange(1, true, first), 0); err != nil {
		t.Fatal(err)
	}
	c.follow.mu.Lock()
	c.follow.saved = time.Now().Add(time.Hour) // no save within the test: a save reads the whole list
	c.follow.mu.Unlock()
	type consumer struct {
		ver   uint64
		recs  map[string]control.NodeRecord
		every int // asks after every this many changes
		whole int // whole lists read
	}
	cs := []*consumer{{every: 1}, {every: 7}, {every: 2*logMostIDs - 1000}}
	rnd := rand.New(rand.NewPCG(3, 4))
	idx := uint64(2)
	for step := range 3 * logMostIDs {
		ch := nodesChange(idx, false, nil)
		idx++
		id := fmt.Sprintf("id-%d", rnd.IntN(80))
		if rnd.IntN(3) == 0 {
			ch.Del = map[string][]string{control.SectionNodes: {id}}
		} else {
			ch.Put[control.SectionNodes][id] = []byte(workerJSON(fmt.Sprintf("n%02d", rnd.IntN(80)), 4000+rnd.IntN(100)))
		}
		builds := c.Stats().ListBuilds
		if _, err := c.applyChange(ch, 0); err != nil {
			t.Fatal(err)
		}
		if got := c.Stats().ListBuilds; got != builds {
			t.Fatalf("step %d: a delta built the list (%d builds, was %d)", step, got, builds)
		}
		for _, k := range cs {
			if step%k.every != 0 {
				continue
			}
			d := c.RecordsSince(k.ver)
			if d.Whole {
				k.whole++
				k.recs = map[string]control.NodeRecord{}
				for _, r := range d.All {
					k.recs[r.ID] = r
				}
			}
			for _, r := range d.Put {
				k.recs[r.ID] = r
			}
			for _, id := range d.Del {
				delete(k.recs, id)
			}
			k.ver = d.Version
			if step%16 != 0 && k.every == 1 {
				continue // compared every 16th step: the map comparison is most of the test's time
			}
			c.nodes.mu.Lock()
			same := reflect.DeepEqual(k.recs, c.nodes.recs)
			c.nodes.mu.Unlock()
			if !same {
				t.Fatalf("step %d: a consumer asking every %d changes holds other records than the list", step, k.every)
			}
		}
	}
	if cs[0].whole != 1 || cs[1].whole != 1 {
		t.Errorf("consumers within the log read the whole list %d and %d times, want once (their first ask)", cs[0].whole, cs[1].whole)
	}
	if cs[2].whole < 2 {
		t.Errorf("a consumer behind the log read the whole list %d times, want every ask", cs[2].whole)
	}
}
