package control

import (
	"sync"
	"time"

	"github.com/meshd/meshd/agent/state"
)

// joinAges measures how long each join has been pending on THIS node's
// clock: from when this control node first saw the node joining to now,
// both read here (a monotonic difference). An admission's Created is
// stamped by the seed that served it; subtracting it from the leader's
// clock failed healthy joins 2 s after admission on a leader whose clock
// ran 2 h ahead (issue 28). Every control node sweeps (watchJoins), so a
// new leader has been timing the joins it inherits; one that restarted
// starts timing them then, which only ever fails a join later.
type joinAges struct {
	mu   sync.Mutex
	seen map[string]time.Time // node id -> when this node first saw it joining
}

// observe notes every joining node of nodes first seen at now and forgets
// the ones no longer joining.
func (j *joinAges) observe(nodes []state.Node, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.seen == nil {
		j.seen = map[string]time.Time{}
	}
	joining := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n.State != state.NodeJoining {
			continue
		}
		joining[n.ID] = true
		if _, ok := j.seen[n.ID]; !ok {
			j.seen[n.ID] = now
		}
	}
	for id := range j.seen {
		if !joining[id] {
			delete(j.seen, id)
		}
	}
}

// age is how long node id has been seen joining here, as of now; 0 if it
// never was (observe first).
func (j *joinAges) age(id string, now time.Time) time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	first, ok := j.seen[id]
	if !ok {
		return 0
	}
	return now.Sub(first)
}
