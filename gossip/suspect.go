package gossip

import (
	"strings"
	"sync"
	"time"
)

// This node's own suspicions. memberlist's public Members() never shows
// one: the Node it returns is embedded in its private nodeState, whose own
// State field (the one suspectNode sets) shadows Node.State, which stays
// StateAlive (memberlist v0.5). The only place a suspicion shows is the
// line memberlist logs when this node's probe of a member fails, direct
// and indirect alike: "Suspect NAME has failed, no acks received". The log
// sink records it, as it counts key errors, and a suspicion counts for
// suspectFor after its last line: memberlist logs it again at every failed
// probe of a member still suspected, and logs nothing when the member
// answers again (so a member that refuted or rejoined stays in Suspects
// until the window passes; Members does not use it for that reason).
// Before Suspects, gossip reported StatusSuspect from Node.State, which
// never changes, so agent/member/relaydown.go's rebuild on a relay's
// suspicion never ran (e2e.TestNATSymmetricRelayed/lan failed in `make
// test`).

const (
	suspectPrefix = "Suspect "
	suspectSuffix = " has failed, no acks received"
)

// suspicions holds when this node last suspected each member. Safe for
// concurrent use.
type suspicions struct {
	mu     sync.Mutex
	at     map[string]time.Time
	window time.Duration
	now    func() time.Time
	fresh  func() // called when a member not suspected within the window is (Gossip.Changes)
}

func newSuspicions(window time.Duration, fresh func()) *suspicions {
	if fresh == nil {
		fresh = func() {}
	}
	return &suspicions{at: map[string]time.Time{}, window: window, now: time.Now, fresh: fresh}
}

// saw records the suspicion a memberlist message reports, if it is one.
func (s *suspicions) saw(msg string) {
	rest, ok := strings.CutPrefix(msg, suspectPrefix)
	if !ok {
		return
	}
	name, ok := strings.CutSuffix(rest, suspectSuffix)
	if !ok || name == "" {
		return
	}
	s.mu.Lock()
	now := s.now()
	last, ok := s.at[name]
	s.at[name] = now
	s.mu.Unlock()
	if !ok || now.Sub(last) >= s.window {
		s.fresh()
	}
}

// active are the members suspected within the window, by name.
func (s *suspicions) active() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	now := s.now()
	for name, at := range s.at {
		if now.Sub(at) < s.window {
			out[name] = true
		} else {
			delete(s.at, name)
		}
	}
	return out
}

// suspectFor is how long a suspicion counts after its last line: five
// probe rounds (memberlist probes a member it suspects again within a few
// rounds and logs the line again while it stays unanswered).
func (c Config) suspectFor() time.Duration {
	if c.Fast {
		return 5 * 200 * time.Millisecond
	}
	return 5 * time.Second
}
