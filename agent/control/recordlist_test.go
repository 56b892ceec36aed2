package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
)

// TestRecordsBuiltOncePerChange: Records hands the same list while
// nothing was applied, and a new one that holds the change once a node
// changed (the FSM builds its shared view again after any command, and
// the list follows it).
func TestRecordsBuiltOncePerChange(t *testing.T) {
	c, origin := newCluster(t)
	p := origin.p
	// Two reads with nothing applied between them (the FSM's index the
	// same before and after): a write the cluster's start left in flight
	// may land between two reads on a loaded box, so a pair it split is
	// read again.
	for try := 0; ; try++ {
		before := p.raft.FSM().Index()
		a, b := p.Records(), p.Records()
		if p.raft.FSM().Index() != before {
			if try == 100 {
				t.Fatal("something was applied between every pair of reads")
			}
			continue
		}
		if len(a) == 0 || &a[0] != &b[0] {
			t.Fatal("two reads with nothing changed built the records twice")
		}
		break
	}
	c.worker(t, origin, "w1")
	waitFor(t, 5*time.Second, "w1 among the records", func() bool {
		for _, r := range p.Records() {
			if r.Name == "w1" && r.State == string(state.NodeActive) {
				return true
			}
		}
		return false
	})
}
