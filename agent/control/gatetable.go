package control

import (
	"container/list"
	"time"

	"golang.org/x/time/rate"
)

// limiterTable holds one token bucket per key (a caller's node id, a
// source network), bounded in size, with no timer: a key's bucket that
// has gone unused for as long as it takes to refill (burst/limit) is
// full, the same as a new one, so it is dropped at the next call of any
// key, oldest first. Past max keys the least recently used goes anyway.
// Every call costs O(1) amortised: a map lookup, a move to the front of
// the list, and the drops it finds at the back. The caller serialises
// calls (gate.mu).
type limiterTable[K comparable] struct {
	limit rate.Limit
	burst int
	max   int
	fill  time.Duration // how long an empty bucket takes to refill
	byKey map[K]*list.Element
	lru   list.List // of *tableEntry[K]; the front was used last
}

type tableEntry[K comparable] struct {
	key    K
	l      *rate.Limiter
	used   time.Time // the last call that looked it up
	logged bool      // its refusal was logged (gate.pass)
}

func newLimiterTable[K comparable](limit rate.Limit, burst, max int) *limiterTable[K] {
	fill := time.Duration(float64(burst) / float64(limit) * float64(time.Second))
	return &limiterTable[K]{limit: limit, burst: burst, max: max, fill: fill, byKey: map[K]*list.Element{}}
}

// get is k's entry at now, created full if k has none, after dropping
// every entry that has refilled since its last use.
func (t *limiterTable[K]) get(k K, now time.Time) *tableEntry[K] {
	for e := t.lru.Back(); e != nil; e = t.lru.Back() {
		te := e.Value.(*tableEntry[K])
		if now.Sub(te.used) < t.fill {
			break
		}
		t.drop(e)
	}
	if e, ok := t.byKey[k]; ok {
		te := e.Value.(*tableEntry[K])
		te.used = now
		t.lru.MoveToFront(e)
		return te
	}
	if t.lru.Len() >= t.max {
		t.drop(t.lru.Back())
	}
	te := &tableEntry[K]{key: k, l: rate.NewLimiter(t.limit, t.burst), used: now}
	t.byKey[k] = t.lru.PushFront(te)
	return te
}

func (t *limiterTable[K]) drop(e *list.Element) {
	delete(t.byKey, e.Value.(*tableEntry[K]).key)
	t.lru.Remove(e)
}

// len is how many keys the table tracks.
func (t *limiterTable[K]) len() int { return t.lru.Len() }
