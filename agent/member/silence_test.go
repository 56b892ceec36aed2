package member

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/mesh"
)

// fakeHeard is a lighthouse's record of host updates, as Nebula patch 9
// keeps it, with counters of what silence asked.
type fakeHeard struct {
	at          map[netip.Addr]time.Time
	heardCalls  int
	silentCalls int
}

func (f *fakeHeard) Silent(cutoff time.Time, n int) ([]mesh.HostHeard, int) {
	f.silentCalls++
	var out []mesh.HostHeard
	for a, at := range f.at {
		if at.Before(cutoff) {
			out = append(out, mesh.HostHeard{Addr: a, At: at})
		}
	}
	slices.SortFunc(out, func(x, y mesh.HostHeard) int { return x.At.Compare(y.At) })
	return out[:min(n, len(out))], len(f.at)
}

func (f *fakeHeard) Heard(a netip.Addr) (time.Time, bool) {
	f.heardCalls++
	at, ok := f.at[a]
	return at, ok
}

func (f *fakeHeard) ForgetHeard(a netip.Addr) { delete(f.at, a) }

// TestSilence: a member unheard for three intervals is silent, listed
// longest silent first and by name; heard again it is not; one silent a
// day is forgotten; an address with no current member is left out of
// status; and a look re-checks only the silent members, not every one
// heard (issue 54: no timer loop touches every peer).
func TestSilence(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := t0
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, byte(i / 250), byte(1 + i%250)}) }
	f := &fakeHeard{at: map[netip.Addr]time.Time{}}
	for i := range 1000 {
		f.at[addr(i)] = t0
	}
	s := newSilence(f, 10*time.Second, func() time.Time { return now })
	names := map[netip.Addr]string{addr(1): "w1", addr(2): "w2", addr(3): "w3"}
	name := func(a netip.Addr) string { return names[a] }

	// 25 s on, everyone reported again but w1 and w2 (w2 after w1).
	now = t0.Add(25 * time.Second)
	for i := range 1000 {
		f.at[addr(i)] = now
	}
	f.at[addr(1)], f.at[addr(2)] = t0, t0.Add(time.Second)
	s.look()
	if got, heard, _ := s.status(name); len(got) != 0 || heard != 1000 {
		t.Fatalf("25 s on (under three intervals): silent %v, heard %d; want none of 1000", got, heard)
	}
	now = t0.Add(35 * time.Second)
	s.look()
	got, _, more := s.status(name)
	if len(got) != 2 || got[0].Name != "w1" || got[0].SilentSeconds != 35 || got[1].Name != "w2" || more {
		t.Fatalf("35 s on: silent %+v (more %v), want w1 (35 s) then w2 (34 s)", got, more)
	}
	// A look costs the silent members: two re-checked, one listing.
	f.heardCalls, f.silentCalls = 0, 0
	s.look()
	if f.heardCalls != 2 || f.silentCalls != 1 {
		t.Fatalf("a look asked Heard %d times and Silent %d times, want 2 and 1", f.heardCalls, f.silentCalls)
	}
	// w1 reports again: no longer silent.
	f.at[addr(1)] = now
	s.look()
	if got, _, _ := s.status(name); len(got) != 1 || got[0].Name != "w2" {
		t.Fatalf("after w1 reported again: %+v, want w2 alone", got)
	}
	// An address with no current member is not shown.
	delete(names, addr(2))
	if got, _, _ := s.status(name); len(got) != 0 {
		t.Fatalf("a silent address with no member shows: %+v", got)
	}
	// A day on, w2 is forgotten by the lighthouse's record.
	now = t0.Add(silentForget + time.Minute)
	s.look()
	if _, ok := f.at[addr(2)]; ok {
		t.Fatal("an address silent for a day is still on the lighthouse's record")
	}
}

// TestSilenceAsLighthouse: what the raft leader's verdict reads of a
// control node's silence (control.Lighthouse): the silent members as the
// last look found them, ages rather than times, how long it has
// listened, and three intervals as the cutoff.
func TestSilenceAsLighthouse(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := t0
	a, b := netip.MustParseAddr("10.42.0.5"), netip.MustParseAddr("10.42.0.6")
	f := &fakeHeard{at: map[netip.Addr]time.Time{a: t0, b: t0}}
	s := newSilence(f, 2*time.Second, func() time.Time { return now })
	if s.After() != 6*time.Second {
		t.Fatalf("After %v, want three 2 s intervals", s.After())
	}
	now = t0.Add(7 * time.Second)
	f.at[b] = now.Add(-time.Second)
	if got := s.Silent(); len(got) != 0 {
		t.Fatalf("before a look: silent %v, want none", got)
	}
	s.look()
	if got := s.Silent(); len(got) != 1 || got[0] != a {
		t.Fatalf("silent %v, want [%v]", got, a)
	}
	if age, ok := s.Heard(b); !ok || age != time.Second {
		t.Errorf("Heard(b) = %v %v, want 1s", age, ok)
	}
	if _, ok := s.Heard(netip.MustParseAddr("10.42.0.9")); ok {
		t.Error("an address never heard has an age")
	}
	if s.Listening() != 7*time.Second {
		t.Errorf("Listening %v, want 7s", s.Listening())
	}
}
