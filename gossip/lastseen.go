package gossip

import (
	"sync"
	"time"
)

// lastSeen remembers, for each member that stopped being alive (it failed
// or left), when this node learned so: about when it was last seen. serf
// keeps that time to itself. A member that comes back is forgotten here.
type lastSeen struct {
	mu   sync.Mutex
	down map[string]time.Time
}

// note records what ev says about its members' liveness.
func (l *lastSeen) note(ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down == nil {
		l.down = map[string]time.Time{}
	}
	for _, m := range ev.Members {
		switch ev.Kind {
		case EventFailed, EventLeave:
			l.down[m.Name] = ev.At
		case EventJoin:
			delete(l.down, m.Name)
		}
	}
}

// since is when name was last seen alive, if it is known to be down.
func (l *lastSeen) since(name string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.down[name]
	return t, ok
}

// LastSeen is when this node learned that the member name failed or left
// (about when it was last seen alive); ok is false for a member alive
// since this node started, or one it never saw go.
func (g *Gossip) LastSeen(name string) (at time.Time, ok bool) { return g.seen.since(name) }
