package member

import (
	"context"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/gossip"
)

// Whoever holds the gossip key can ask every member a query, with a
// deadline and a payload of its choosing; before issue 27 each was
// answered on a goroutine of its own until the asker's deadline, and 20
// forged revocation queries took the control nodes to 1.45 of 2 cores.
// What a query may cost is bounded here, before its answer runs:
//
//   - its deadline is cut to the longest meshd itself asks with
//     (queryKind.longest);
//   - at most queryConcurrency of one kind are answered at once; one
//     past that is dropped, which the asker counts as a member that did
//     not answer, as it would a lost packet (a real asker asks again:
//     gossip.Ask);
//   - each answer bounds its own work (answerRevocation refuses a version
//     far beyond the node's list and fetches it at most once a second).
//
// The queries stay payload-free questions ("do you block version v?",
// "do you run keyring k?"): an answer is liveness, never trust.

// queryConcurrency is how many queries of one kind a node answers at
// once. A removal asks one revocation query, a rotation step one keyring
// query; several removals at once are rare and an answer takes
// milliseconds once the node holds what is asked.
const queryConcurrency = 4

// queryKind is how this node answers one query name.
type queryKind struct {
	answer  func(context.Context, gossip.Query)
	longest time.Duration // the longest deadline meshd itself gives this query
	slots   chan struct{} // queryConcurrency answers in flight at most
}

// queryGate dispatches the queries members ask to their answers, within
// the bounds above.
type queryGate struct {
	kinds map[string]*queryKind
	now   func() time.Time
}

func (ms *membership) queryGate() *queryGate {
	kind := func(answer func(context.Context, gossip.Query), longest time.Duration) *queryKind {
		return &queryKind{answer: answer, longest: longest, slots: make(chan struct{}, queryConcurrency)}
	}
	return &queryGate{now: time.Now, kinds: map[string]*queryKind{
		control.RevocationQueryName: kind(ms.answerRevocation, control.MaxRevocationAckTimeout),
		control.KeyringQueryName:    kind(ms.keys.answerKeyring, control.DefaultKeyStepTimeout),
	}}
}

// dispatch starts q's answer on a goroutine counted in wg, its deadline
// cut to the kind's longest. It reports false for a query this node does
// not answer (an unknown name) or one past the kind's concurrency.
func (g *queryGate) dispatch(ctx context.Context, wg interface{ Go(func()) }, q gossip.Query) bool {
	k, ok := g.kinds[q.Name]
	if !ok {
		return false
	}
	select {
	case k.slots <- struct{}{}:
	default:
		return false
	}
	if latest := g.now().Add(k.longest); q.Deadline.After(latest) {
		q.Deadline = latest
	}
	wg.Go(func() {
		defer func() { <-k.slots }()
		k.answer(ctx, q)
	})
	return true
}

// answerQueries answers the gossip queries members ask, through the
// gate, until ctx ends or gossip stops.
func (ms *membership) answerQueries(ctx context.Context) {
	gate := ms.queryGate()
	for {
		select {
		case <-ctx.Done():
			return
		case q, ok := <-ms.gossip.Queries():
			if !ok {
				return
			}
			if _, known := gate.kinds[q.Name]; known && !gate.dispatch(ctx, &ms.wg, q) {
				ms.log.Debug("gossip query dropped: as many of its kind are being answered as this node allows",
					"query", q.Name, "limit", queryConcurrency)
			}
		}
	}
}
