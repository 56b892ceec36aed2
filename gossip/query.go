package gossip

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/serf/serf"
)

// queryBuffer is how many received queries wait for the consumer; one
// past it is dropped (its asker then counts this node as not answering).
const queryBuffer = 64

// Query is a question another member (or this one) asked every member
// over gossip (a serf query). Answer it with Respond before Deadline.
type Query struct {
	Name     string
	Payload  []byte
	Deadline time.Time
	respond  func([]byte) error
}

// Respond sends b back to the asker. A second answer, or one after the
// deadline, is an error.
func (q Query) Respond(b []byte) error {
	if q.respond == nil {
		return errors.New("gossip query: nothing to respond to")
	}
	return q.respond(b)
}

// NewQuery is a query as Queries delivers it, answered through respond:
// for stand-ins in tests of the code that answers queries.
func NewQuery(name string, payload []byte, deadline time.Time, respond func([]byte) error) Query {
	return Query{Name: name, Payload: payload, Deadline: deadline, respond: respond}
}

// Queries returns the queries members ask, in arrival order; serf's
// internal ones are answered by serf itself and never appear. It is
// closed when Shutdown has stopped serf.
func (g *Gossip) Queries() <-chan Query { return g.queries }

// queryIn hands a serf query to Queries without blocking the pump.
func (g *Gossip) queryIn(q *serf.Query) {
	select {
	case g.queries <- Query{Name: q.Name, Payload: append([]byte(nil), q.Payload...), Deadline: q.Deadline(), respond: q.Respond}:
	default:
		g.log.Warn("gossip query dropped: the consumer is behind", "query", q.Name)
	}
}

// A serf query spreads like any broadcast: each member passes it to a
// few random members a few times, and those may include failed or
// removed members still in the gossip pool, so a live member can miss
// one query (e2e.TestRemoveShowsConvergence saw a control node never get
// a revocation query, and later a key rotation step's, while two removed
// members and a cut one were in the pool). So Ask sends the query again
// while answers are missing: askAgain after the first, then each wait
// twice the one before, until its timeout. A rotation step that waited
// a third of its timeout (10 s) for one lost query now waits about 1 s.
const askAgain = time.Second

// Ask asks every member (this node included) the query name with payload
// and collects the answers by member name until timeout passes, ctx ends,
// or done (if not nil) reports that the answers so far suffice. The query
// goes out again after askAgain, then after twice as long each time,
// while answers are missing (an answer must not depend on being asked
// once). The answers are what
// members sent, the last one per member; a member that did not answer is
// simply absent.
func (g *Gossip) Ask(ctx context.Context, name string, payload []byte, timeout time.Duration,
	done func(answers map[string][]byte) bool) (map[string][]byte, error) {
	if g.isClosed() {
		return nil, fmt.Errorf("gossip query %s: %w", name, errShutdown)
	}
	deadline := time.Now().Add(timeout)
	answers := map[string][]byte{}
	wait := askAgain
	for round := 1; ; round++ {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		resp, err := g.serf.Query(name, payload, &serf.QueryParam{Timeout: left})
		if err != nil {
			if round > 1 {
				return answers, nil
			}
			return nil, fmt.Errorf("gossip query %s: %w", name, err)
		}
		end := time.NewTimer(min(wait, left))
		wait *= 2
		finished := collect(ctx, resp, end.C, answers, done)
		end.Stop()
		resp.Close()
		if finished || ctx.Err() != nil {
			return answers, nil
		}
	}
	return answers, nil
}

// collect adds resp's answers to answers until the round ends (false),
// or ctx ends, resp closes or done is satisfied (true).
func collect(ctx context.Context, resp *serf.QueryResponse, end <-chan time.Time, answers map[string][]byte,
	done func(map[string][]byte) bool) bool {
	for {
		select {
		case <-ctx.Done():
			return true
		case <-end:
			return false
		case r, ok := <-resp.ResponseCh():
			if !ok {
				return true
			}
			answers[r.From] = append([]byte(nil), r.Payload...)
			if done != nil && done(answers) {
				return true
			}
		}
	}
}
