package apitype

import (
	"testing"
	"time"
)

// TestHidden (issue 52 item 2): `meshctl nodes` hides a former node once
// its departure is older than the retention, never a member.
func TestHidden(t *testing.T) {
	now := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		state    string
		departed time.Time
		want     bool
	}{
		{"left", now.Add(-day - time.Second), true},
		{"removed", now.Add(-day - time.Second), true},
		{"failed", now.Add(-2 * day), true},
		{"left", now.Add(-day), false},
		{"removed", now.Add(-time.Hour), false},
		{"left", time.Time{}, false}, // a daemon that does not say when: shown
		{"active", now.Add(-2 * day), false},
		{"joining", now.Add(-2 * day), false},
	} {
		if got := (Node{State: tc.state, Departed: tc.departed}).Hidden(now, day); got != tc.want {
			t.Errorf("%s departed %s ago: hidden %v, want %v", tc.state, now.Sub(tc.departed), got, tc.want)
		}
	}
}
