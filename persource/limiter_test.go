package persource

import (
	"net/netip"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Limits{PerSource: 2, Window: time.Second, MaxSources: 2}, func() time.Time { return now })
	a, b, c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	for i, want := range []bool{true, true, false} {
		if got := l.Allow(a); got != want {
			t.Fatalf("request %d from a: allowed %v, want %v", i+1, got, want)
		}
	}
	if !l.Allow(b) {
		t.Fatal("b refused with room in the table")
	}
	if l.Allow(c) {
		t.Fatal("a third source allowed past MaxSources 2")
	}
	if !l.Allow(netip.MustParseAddr("::ffff:10.0.0.2")) {
		t.Fatal("b's mapped form counted as a new source")
	}
	now = now.Add(time.Second)
	if !l.Allow(a) || !l.Allow(c) {
		t.Fatal("the next window still refuses")
	}
}

func TestDefaults(t *testing.T) {
	got := New(Limits{}, nil).Limits()
	if got.PerSource != 20 || got.Window != time.Second || got.MaxSources != 4096 {
		t.Fatalf("defaults %+v", got)
	}
}
