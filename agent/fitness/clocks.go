package fitness

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/codes"
)

// Clocks compares this control node's clock with the other control
// nodes': Observe records how far each peer's clock runs ahead of this
// one (measured over a request, at its midpoint). Who is wrong is decided
// by the median of all the clocks, this one included: a node is skewed
// when its clock is more than max from the median. With three control
// nodes one wrong clock is found; with two, neither can tell, and both
// count as skewed (fail closed: neither mints until a clock is fixed).
type Clocks struct {
	max time.Duration

	mu      sync.Mutex
	offsets map[string]time.Duration // peer name -> its clock minus this one
}

// NewClocks judges against max (meshd.yaml max_clock_skew).
func NewClocks(max time.Duration) *Clocks {
	return &Clocks{max: max, offsets: map[string]time.Duration{}}
}

// Observe records peer's latest offset: its clock minus this node's.
func (c *Clocks) Observe(peer string, offset time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offsets[peer] = offset
}

// Keep forgets every peer not in peers (it left, or is no control node).
func (c *Clocks) Keep(peers []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.offsets {
		if !slices.Contains(peers, p) {
			delete(c.offsets, p)
		}
	}
}

// Verdict is the comparison as of the last observations.
type Verdict struct {
	// Deviation is how far this clock runs ahead of the median of the
	// control nodes' clocks (negative: behind); 0 with no peer measured.
	Deviation time.Duration
	// Offsets are the peers' clocks minus this one, by name.
	Offsets map[string]time.Duration
	// Skewed names the clocks more than max from the median: "" for this
	// node's own, else a peer's name.
	Skewed []string
	Max    time.Duration
}

// Untrusted is codes.ClockUntrusted when this node's own clock is more than
// max from the median, else nil.
func (v Verdict) Untrusted() error {
	if !slices.Contains(v.Skewed, "") {
		return nil
	}
	ahead := "ahead of"
	if v.Deviation < 0 {
		ahead = "behind"
	}
	return codes.Wrap(codes.ClockUntrusted, fmt.Errorf("this control node's clock runs %s %s the median of the %d control nodes' clocks, more than the %s allowed (max_clock_skew)",
		abs(v.Deviation).Round(time.Millisecond), ahead, len(v.Offsets)+1, v.Max))
}

// Verdict compares the clocks.
func (c *Clocks) Verdict() Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := Verdict{Offsets: make(map[string]time.Duration, len(c.offsets)), Max: c.max}
	if len(c.offsets) == 0 {
		return v
	}
	all := []time.Duration{0} // this clock
	for p, o := range c.offsets {
		v.Offsets[p] = o
		all = append(all, o)
	}
	med := median(all)
	v.Deviation = -med // this clock (0) minus the median
	if abs(v.Deviation) > c.max {
		v.Skewed = append(v.Skewed, "")
	}
	for p, o := range c.offsets {
		if abs(o-med) > c.max {
			v.Skewed = append(v.Skewed, p)
		}
	}
	slices.Sort(v.Skewed)
	return v
}

// median of ds (the mean of the middle two for an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return s[n/2-1] + (s[n/2]-s[n/2-1])/2
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
