package fitness

import (
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestClocksVerdict: the median of the control nodes' clocks decides
// whose clock is wrong; two clocks that disagree both count as skewed.
func TestClocksVerdict(t *testing.T) {
	const max = 5 * time.Minute
	tests := []struct {
		name    string
		offsets map[string]time.Duration // peers' clocks minus this one
		skewed  []string
		dev     time.Duration
	}{
		{name: "ok/no-peer-measured", offsets: nil, skewed: nil},
		{name: "ok/three-agree", offsets: map[string]time.Duration{"c2": time.Second, "c3": -2 * time.Second}},
		{name: "fail/this-one-2h-ahead", offsets: map[string]time.Duration{"c2": -2 * time.Hour, "c3": -2*time.Hour + time.Second},
			skewed: []string{""}, dev: 2*time.Hour - time.Second},
		{name: "ok/a-peer-2h-ahead", offsets: map[string]time.Duration{"c2": 2 * time.Hour, "c3": time.Second},
			skewed: []string{"c2"}, dev: -time.Second},
		{name: "fail/two-disagree", offsets: map[string]time.Duration{"c2": 2 * time.Hour},
			skewed: []string{"", "c2"}, dev: -time.Hour},
		{name: "ok/within-max", offsets: map[string]time.Duration{"c2": 4 * time.Minute}, dev: -2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewClocks(max)
			for p, o := range tt.offsets {
				c.Observe(p, o)
			}
			v := c.Verdict()
			if !slices.Equal(v.Skewed, tt.skewed) || v.Deviation != tt.dev {
				t.Fatalf("verdict %+v; want skewed %q, deviation %s", v, tt.skewed, tt.dev)
			}
			if err := v.Untrusted(); (err != nil) != slices.Contains(tt.skewed, "") ||
				err != nil && codes.Of(err) != codes.ClockUntrusted {
				t.Fatalf("Untrusted() = %v", err)
			}
		})
	}
	c := NewClocks(max)
	c.Observe("c2", 2*time.Hour)
	c.Keep([]string{"c3"})
	if v := c.Verdict(); len(v.Offsets) != 0 || v.Skewed != nil {
		t.Fatalf("after Keep: %+v, want c2 forgotten", v)
	}
}
