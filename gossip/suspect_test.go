package gossip

import (
	"testing"
	"time"
)

// TestSuspicions: memberlist's "Suspect NAME has failed, no acks received"
// marks NAME suspected for the window after its last line; other lines,
// and a line about this node's refutation, mark nothing. A member newly
// suspected rings Changes once; a line repeating a live suspicion does not.
func TestSuspicions(t *testing.T) {
	now := time.Unix(1000, 0)
	fresh := 0
	s := newSuspicions(5*time.Second, func() { fresh++ })
	s.now = func() time.Time { return now }
	for _, msg := range []string{
		"Suspect c1 has failed, no acks received",
		"Refuting a suspect message (from: c2)",
		"Marking c3 as failed, suspect timeout reached (0 peer confirmations)",
		"Suspect  has failed, no acks received",
		"Failed UDP ping: w2 (timeout reached)",
	} {
		s.saw(msg)
	}
	if got := s.active(); len(got) != 1 || !got["c1"] || fresh != 1 {
		t.Fatalf("active = %v, %d fresh suspicions; want only c1, 1", got, fresh)
	}
	now = now.Add(4 * time.Second)
	s.saw("Suspect c1 has failed, no acks received") // probed again, still unanswered
	now = now.Add(4 * time.Second)
	if got := s.active(); !got["c1"] {
		t.Fatalf("8 s after the first line, 4 s after the last: %v, want c1 still suspected", got)
	}
	now = now.Add(time.Second)
	if got := s.active(); len(got) != 0 || fresh != 1 {
		t.Fatalf("5 s after the last line: %v, %d fresh suspicions; want none, 1", got, fresh)
	}
	s.saw("Suspect c1 has failed, no acks received")
	if fresh != 2 {
		t.Fatalf("c1 suspected again after its window: %d fresh suspicions, want 2", fresh)
	}
}

// TestSuspectsLive: with real memberlist, a member that stops answering
// is in its probers' Suspects within a few probe rounds (fast timers).
func TestSuspectsLive(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b", "c")
	if got := nodes[0].g.Suspects(); len(got) != 0 {
		t.Fatalf("a suspects %v with every member up", got)
	}
	cAddr := nodes[2].g.LocalMember().Addr.Addr()
	if st := nodes[0].g.Statuses(); len(st) != 3 || st[cAddr] != StatusAlive {
		t.Fatalf("a's Statuses with every member up: %v; want 3, c (%s) alive", st, cAddr)
	}
	woke := nodes[0].g.Changes()
	if err := nodes[2].g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	select { // c's suspicion (or its failure) wakes a's loops
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Fatal("a's Changes not closed within 5 s of c stopping")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !nodes[0].g.Suspects()["c"] || !nodes[1].g.Suspects()["c"] {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after c stopped: a suspects %v, b %v; want c in both", nodes[0].g.Suspects(), nodes[1].g.Suspects())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What Statuses says of c while a suspects it: suspect, or failed
	// once gossip has decided (never alive).
	if st := nodes[0].g.Statuses()[cAddr]; st != StatusSuspect && st != StatusFailed {
		t.Fatalf("a suspects c; its Statuses says %q, want %q (or %q)", st, StatusSuspect, StatusFailed)
	}
}
