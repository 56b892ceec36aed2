package fetched

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestRetryWaitBounds: with the random source at its ends, a failover's
// wait stays in [watchRetryMin/2, failoverSpread) and a failed attempt's
// in [backoff/2, backoff); none past watchRetryMax at any cluster size.
func TestRetryWaitBounds(t *testing.T) {
	lowest := func(time.Duration) time.Duration { return 0 }
	highest := func(n time.Duration) time.Duration { return n - 1 }
	for _, tc := range []struct {
		name    string
		useful  bool
		backoff time.Duration
		members int
		lo, hi  time.Duration // wait in [lo, hi)
	}{
		{"failover/small", true, watchRetryMin, 3, 100 * time.Millisecond, time.Second},
		{"failover/1000", true, watchRetryMin, 1000, 100 * time.Millisecond, time.Second},
		{"failover/3000", true, watchRetryMin, 3000, 100 * time.Millisecond, 3 * time.Second},
		{"failover/100000", true, watchRetryMin, 100000, 100 * time.Millisecond, watchRetryMax},
		{"failed/first", false, 400 * time.Millisecond, 1000, 200 * time.Millisecond, 400 * time.Millisecond},
		{"failed/max", false, watchRetryMax, 1000, watchRetryMax / 2, watchRetryMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo := retryWait(tc.useful, tc.backoff, tc.members, lowest)
			hi := retryWait(tc.useful, tc.backoff, tc.members, highest)
			if lo != tc.lo || hi >= tc.hi || hi < tc.hi-time.Nanosecond {
				t.Fatalf("waits [%s, %s], want [%s, %s)", lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

// TestFailoverSpreads: 1,000 workers whose control node stopped (each
// stream had been useful) reconnect spread over the failover window: no
// 100 ms of it takes more than a fifth of them, where the window of
// before (100-200 ms) took all of them. The random source is seeded, so
// the outcome is the same on every run.
func TestFailoverSpreads(t *testing.T) {
	const workers = 1000
	src := rand.New(rand.NewPCG(54, 4))
	rnd := func(n time.Duration) time.Duration { return time.Duration(src.Int64N(int64(n))) }
	buckets := map[time.Duration]int{}
	var last time.Duration
	for range workers {
		w := retryWait(true, watchRetryMin, workers, rnd)
		buckets[w/(100*time.Millisecond)]++
		last = max(last, w)
	}
	most := 0
	for _, n := range buckets {
		most = max(most, n)
	}
	if most > workers/5 {
		t.Errorf("%d of %d workers reconnect within one 100 ms; want at most a fifth", most, workers)
	}
	if last >= failoverSpread(workers) {
		t.Errorf("the last reconnects after %s, past the window %s", last, failoverSpread(workers))
	}
	t.Logf("%d workers over %d windows of 100 ms, at most %d in one, the last after %s", workers, len(buckets), most, last.Round(time.Millisecond))
}
