package control

import (
	"sync"
	"time"
)

// leaderWatch closes a channel once this node has seen no raft leader for
// watchLeaderless, for every stream at once; a leader seen again gives
// the next streams a new one.
type leaderWatch struct {
	bound, every time.Duration
	mu           sync.Mutex
	lost         chan struct{} // closed while leaderless past the bound
}

// newLeaderWatch looks for a leader every every, and gives up on one
// after bound.
func newLeaderWatch(bound, every time.Duration) *leaderWatch {
	return &leaderWatch{bound: bound, every: every, lost: make(chan struct{})}
}

func (l *leaderWatch) gone() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// run looks for a leader until stop.
func (l *leaderWatch) run(stop <-chan struct{}, leader func() string) {
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	var since time.Time // when the leader was last seen missing; zero while there is one
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		l.mu.Lock()
		closed := isClosed(l.lost)
		switch {
		case leader() != "":
			since = time.Time{}
			if closed {
				l.lost = make(chan struct{})
			}
		case since.IsZero():
			since = time.Now()
		case !closed && time.Since(since) >= l.bound:
			close(l.lost)
		}
		l.mu.Unlock()
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
