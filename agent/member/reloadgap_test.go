package member

import (
	"testing"
	"time"
)

// TestReloadGap: the gap after a reload is reloadGap for a quick reload
// and reloadShare times a slow one (at 1,000 static hosts a reload took
// about 50 ms here, so the next waits half a second), never more than
// reloadGapMost; and gapLeft counts down from the last reload to 0, never
// below.
func TestReloadGap(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, reloadGap},
		{time.Millisecond, reloadGap},
		{reloadGap / reloadShare, reloadGap},
		{50 * time.Millisecond, 500 * time.Millisecond},
		{reloadGapMost / reloadShare, reloadGapMost},
		{time.Second, reloadGapMost}, // a starved reload holds the next at most a second
	} {
		if got := nextGap(tc.took); got != tc.want {
			t.Errorf("nextGap(%s) = %s, want %s", tc.took, got, tc.want)
		}
	}

	ov := &overlay{}
	if left := ov.gapLeft(); left != 0 {
		t.Fatalf("before any reload, gapLeft = %s, want 0", left)
	}
	ov.lastReload, ov.gap = time.Now(), time.Hour
	if left := ov.gapLeft(); left <= 59*time.Minute || left > time.Hour {
		t.Fatalf("just after a reload with an hour's gap, gapLeft = %s", left)
	}
	ov.lastReload = time.Now().Add(-2 * time.Hour)
	if left := ov.gapLeft(); left != 0 {
		t.Fatalf("an hour after the gap ended, gapLeft = %s, want 0", left)
	}
}
