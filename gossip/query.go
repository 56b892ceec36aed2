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

// Ask asks every member (this node included) the query name with payload
// and collects the answers by member name until timeout passes, ctx ends,
// or done (if not nil) reports that the answers so far suffice. The
// answers are what members sent; a member that did not answer is simply
// absent.
func (g *Gossip) Ask(ctx context.Context, name string, payload []byte, timeout time.Duration,
	done func(answers map[string][]byte) bool) (map[string][]byte, error) {
	if g.isClosed() {
		return nil, fmt.Errorf("gossip query %s: %w", name, errShutdown)
	}
	resp, err := g.serf.Query(name, payload, &serf.QueryParam{Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("gossip query %s: %w", name, err)
	}
	defer resp.Close()
	answers := map[string][]byte{}
	for {
		select {
		case <-ctx.Done():
			return answers, nil
		case r, ok := <-resp.ResponseCh():
			if !ok {
				return answers, nil
			}
			answers[r.From] = append([]byte(nil), r.Payload...)
			if done != nil && done(answers) {
				return answers, nil
			}
		}
	}
}
