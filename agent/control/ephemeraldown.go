package control

import (
	"sync"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// ephemeralDown measures, on THIS node's clock alone, how long each
// ephemeral worker has been down: failed or left in this node's gossip
// view, gone from it, or recorded left. Times from another node are
// never compared with this node's (issue 28; joinage.go): the times it
// reads are its own gossip's (LastSeen, when this node learned the member
// failed or left) and its own observations. Every control node observes
// at every sweep (watchEphemeral), so a new leader has been timing the
// nodes it inherits; one that restarted starts then, which only ever
// reaps later.
type ephemeralDown struct {
	mu sync.Mutex
	// seen: when this node last saw the node up, or first saw its record
	// (active or left). A gossip time from before it describes an earlier
	// episode (or the name's previous holder: a node forgotten, its name
	// admitted again) and is not used.
	seen map[string]time.Time
	// since: when the node went down, as this node knows it.
	since map[string]time.Time
	// removed: when this node first saw a removed ephemeral record that
	// is not forgotten yet.
	removed map[string]time.Time
}

// ephemeralWorker reports whether the reaper looks after n at all: an
// ephemeral worker (state.EphemeralAllowed; a control node flagged
// ephemeral is never removed on a timer).
func ephemeralWorker(n state.Node) bool { return n.Ephemeral && n.Role == pki.RoleWorker }

// observe notes, as of now, each ephemeral worker's liveness in view
// (the gossip view by name, desired.View's statuses) and lastSeen (this
// node's gossip: when it learned a member failed or left), and forgets
// the records that are gone or no longer ephemeral workers. An active
// node alive in the view is up: a restart within the window clears its
// time. One suspect in the view is gossip's bad news that this node's
// own direct probe has not judged yet (agent/member/evidence.go; serf's
// suspicions show alive): nothing is decided about it until the probe
// ends, so a node the probe finds down is timed from gossip's lastSeen
// as before. One failed, left or leaving in the view, absent from
// it while the view holds another member, or with a lastSeen time is
// down: since the lastSeen time when that is after this node last saw
// it up (or first saw its record), else since this node first saw it
// down. A record left is down. With neither a view nor a lastSeen time
// (gossip not running yet) nothing is decided either way.
func (e *ephemeralDown) observe(nodes []state.Node, view map[string]string, lastSeen func(string) (time.Time, bool),
	self string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen == nil {
		e.seen, e.since, e.removed = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	}
	viewKnown := false
	for name := range view {
		if name != self {
			viewKnown = true
			break
		}
	}
	keep := map[string]bool{}
	for _, n := range nodes {
		if !ephemeralWorker(n) {
			continue
		}
		switch n.State {
		case state.NodeRemoved:
			keep[n.ID] = true
			if _, ok := e.removed[n.ID]; !ok {
				e.removed[n.ID] = now
			}
			continue
		case state.NodeActive, state.NodeLeft:
		default:
			continue // joining (bounded by the join bound) or failed
		}
		keep[n.ID] = true
		mark, ok := e.seen[n.ID]
		if !ok {
			mark = now
			e.seen[n.ID] = now
		}
		st, inView := view[n.Name]
		if n.State == state.NodeActive && inView && st == "alive" { // gossip.StatusAlive (not imported here)
			e.seen[n.ID] = now
			delete(e.since, n.ID)
			continue
		}
		if n.State == state.NodeActive && inView && st == "suspect" { // gossip.StatusSuspect: the probe is under way
			continue
		}
		at, seenDown := lastSeen(n.Name)
		if n.State == state.NodeActive && !inView && !viewKnown && !seenDown {
			continue // this node's gossip knows nothing yet
		}
		t, ok := e.since[n.ID]
		if !ok {
			t = now
		}
		if seenDown && !at.Before(mark) && at.Before(t) {
			t = at
		}
		e.since[n.ID] = t
	}
	for _, m := range []map[string]time.Time{e.seen, e.since, e.removed} {
		for id := range m {
			if !keep[id] {
				delete(m, id)
			}
		}
	}
}

// down is how long node id has been down as of now, as observed here;
// ok is false while it is not known down.
func (e *ephemeralDown) down(id string, now time.Time) (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.since[id]
	if !ok {
		return 0, false
	}
	return now.Sub(t), true
}

// up notes node id up as of now (it answered a direct probe): its down
// time, if any, is gone, and a gossip time from before now describes an
// earlier episode.
func (e *ephemeralDown) up(id string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.seen[id]; ok {
		e.seen[id] = now
	}
	delete(e.since, id)
}

// removedFor is how long node id has been seen removed here as of now.
func (e *ephemeralDown) removedFor(id string, now time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.removed[id]
	if !ok {
		return 0
	}
	return now.Sub(t)
}
