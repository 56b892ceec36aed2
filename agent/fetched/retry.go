package fetched

import (
	"math/rand/v2"
	"time"
)

// Watch retries: a stream that failed or was refused is opened again on
// the next control node after watchRetryMin, doubling to watchRetryMax,
// with jitter.
//
// A stream that ended after it had brought something is a failover: its
// control node went away (a stop ends every stream it serves at once,
// control.StopServing), and every worker it served moves to another at
// the same moment. Each waits a random time in [watchRetryMin/2,
// failoverSpread(members)) first, so their TLS handshakes (resumed, most
// of them: control.Client keeps sessions) reach the other control nodes
// spread out instead of at once (issue 54 item 4). The spread grows with
// the cluster, failoverPer1000 per 1,000 members, from 1 s to
// watchRetryMax.
const (
	watchRetryMin   = 200 * time.Millisecond
	watchRetryMax   = 5 * time.Second
	failoverMin     = time.Second
	failoverPer1000 = time.Second
)

// failoverSpread is the window a failover's reconnections spread over in
// a cluster of members.
func failoverSpread(members int) time.Duration {
	return min(watchRetryMax, max(failoverMin, time.Duration(members)*failoverPer1000/1000))
}

// retryWait is how long Follow waits before its next stream: after a
// useful stream, a random time in [watchRetryMin/2, failoverSpread);
// after a failed attempt, backoff/2 plus a random part of up to
// backoff/2. rnd(n) is a random duration in [0, n) (rand.N; a test
// injects its own). It never exceeds watchRetryMax.
func retryWait(useful bool, backoff time.Duration, members int, rnd func(time.Duration) time.Duration) time.Duration {
	if useful {
		lo := watchRetryMin / 2
		return lo + rnd(failoverSpread(members)-lo)
	}
	return min(watchRetryMax, backoff/2+rnd(backoff/2))
}

// randN is rand.N for durations: Follow's random source unless a test
// set followState.rnd.
func randN(n time.Duration) time.Duration { return rand.N(n) }
