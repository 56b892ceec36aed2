package mesh

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// TestLighthouseHeard (Nebula patch 9): a lighthouse records when each
// member last sent it a host update, refreshes it at every update (each
// lighthouse.interval: 1 s with Fast), lists the longest silent first, and
// forgets a member on request. Without the patch Mesh.Heard has nothing
// to read and the test does not build.
func TestLighthouseHeard(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	lhIP := overlayIP(1).Addr()
	lh, lhs := testLighthouse(t, ca)
	member := func(name string, n byte) netip.Addr {
		if _, err := Start(memberConfig(t, ca, name, n, lhs), testLogger(name)); err != nil {
			t.Fatal(err)
		}
		return overlayIP(n).Addr()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	if _, ok := lh.Heard(overlayIP(2).Addr()); ok {
		t.Fatal("heard from a member before any started")
	}
	a := member("a", 2)
	if !waitFor(ctx, func() bool { _, ok := lh.Heard(a); return ok }) {
		t.Fatal("the lighthouse never took a host update from a within 15 s")
	}
	b := member("b", 3)
	if !waitFor(ctx, func() bool { _, ok := lh.Heard(b); return ok }) {
		t.Fatal("the lighthouse never took a host update from b within 15 s")
	}
	first, _ := lh.Heard(a)
	if !waitFor(ctx, func() bool { at, _ := lh.Heard(a); return at.After(first) }) {
		t.Fatal("a's next host update (lighthouse.interval 1 s) was not recorded within 15 s")
	}

	// Nothing is silent before the oldest update; everything is, as seen
	// from a cutoff in the future, longest silent first.
	aAt, _ := lh.Heard(a)
	bAt, _ := lh.Heard(b)
	oldest := min(aAt.UnixNano(), bAt.UnixNano())
	if s, heard := lh.Silent(time.Unix(0, oldest), 10); len(s) != 0 || heard != 2 {
		t.Fatalf("Silent before the oldest update: %v (heard %d), want none of 2", s, heard)
	}
	later := time.Now().Add(time.Hour)
	s, _ := lh.Silent(later, 10)
	if len(s) != 2 || s[0].At.After(s[1].At) {
		t.Fatalf("Silent an hour on: %v, want a and b, oldest first", s)
	}
	if one, _ := lh.Silent(later, 1); len(one) != 1 || one[0] != s[0] {
		t.Fatalf("Silent(…, 1) = %v, want only the longest silent %v", one, s[0])
	}

	lh.ForgetHeard(a)
	if _, ok := lh.Heard(a); ok {
		// a may have reported again since: forgetting is of the past only.
		if s, _ := lh.Silent(later, 10); len(s) != 2 {
			t.Fatalf("after forgetting a and a new update, %v", s)
		}
	} else if s, heard := lh.Silent(later, 10); heard != 1 || len(s) != 1 || s[0].Addr != b {
		t.Fatalf("after forgetting a: %v (heard %d), want b alone", s, heard)
	}
	if _, ok := lh.Heard(lhIP); ok {
		t.Fatal("the lighthouse recorded itself")
	}
}
