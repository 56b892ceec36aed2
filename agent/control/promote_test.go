package control

import (
	"testing"
	"time"
)

// TestCaughtUp: a non-voter is promoted only when both halves hold — its
// log has every committed entry, and it heard from a leader recently.
// Each row breaks exactly one half, so loosening either is caught.
func TestCaughtUp(t *testing.T) {
	const commit = 100
	for _, tc := range []struct {
		name string
		st   RaftStats
		want bool
	}{
		{"caught up, fresh contact", RaftStats{LastLogIndex: 100, LastContact: 10 * time.Millisecond}, true},
		{"ahead of commit", RaftStats{LastLogIndex: 101, LastContact: 0}, true},
		{"one entry behind", RaftStats{LastLogIndex: 99, LastContact: 10 * time.Millisecond}, false},
		{"empty log", RaftStats{LastLogIndex: 0, LastContact: 10 * time.Millisecond}, false},
		{"never heard from a leader", RaftStats{LastLogIndex: 100, LastContact: -1}, false},
		{"contact exactly maxContact ago", RaftStats{LastLogIndex: 100, LastContact: maxContact}, false},
		{"contact just under maxContact", RaftStats{LastLogIndex: 100, LastContact: maxContact - time.Nanosecond}, true},
		{"stale contact", RaftStats{LastLogIndex: 100, LastContact: 5 * time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.caughtUp(commit); got != tc.want {
				t.Fatalf("caughtUp(%+v, commit %d) = %v, want %v", tc.st, commit, got, tc.want)
			}
		})
	}
}
