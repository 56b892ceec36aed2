package fetched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
)

// A node the cluster no longer knows says so (issue 52 item 9). A node
// that was removed (or reaped) while it could not hear of it came back a
// silent zombie: it answered names from its stale copy and asked the
// control nodes every 5 s forever, logging their refusals at debug. Now
// its standing is judged from two kinds of evidence only:
//
//   - an authoritative refusal: every control node it asks answers
//     codes.NotMember, in a run of answers with nothing else between them
//     (one that cannot be reached, or answers anything else, starts the
//     run over: a connection error is never a refusal);
//   - its own record, in its copy of the records, reads left, removed or
//     failed.
//
// A join in progress is not a refusal (a joining record is served the
// routes a join needs), nor is a renewed leaf (a control node behind the
// renewal asks its leader before it refuses). Once judged removed, the
// node stops its overlay and its names (agent/member), logs one error
// with codes.RemovedByCluster, and asks the control nodes again at most
// once per RemovedRetry; an answer that accepts it (the removal was a
// mistake that was undone, or a control node's refusal was wrong)
// restores it, and its overlay and names start again.

// RemovedRetry is the least time between two asks of a node judged
// removed.
const RemovedRetry = time.Minute

// Standing is whether the cluster still knows this node, as the control
// nodes' answers and its own record show it. A worker's copies feed it
// their watch stream's and strict reads' answers; a control node feeds it
// its own record and its peers' answers (agent/member). Safe for
// concurrent use.
type Standing struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	changed func(removed bool) // told after every change of Removed; set before use
	refused map[string]string  // control node -> its refusal, in the current run
	removed bool
	since   time.Time // when it was judged removed
	why     string    // what it was judged on
	asked   time.Time // the last ask while removed (since, at first)
	rounds  int       // asks while removed
	known   chan struct{}
	leaving bool // the node leaves on its own: refusals are its own doing (Leaving)
}

// NewStanding is a standing of a node the cluster knows. now is its clock
// (nil: time.Now): the pace of the asks while removed.
func NewStanding(now func() time.Time, log *slog.Logger) *Standing {
	if now == nil {
		now = time.Now
	}
	k := make(chan struct{})
	close(k)
	return &Standing{log: log, now: now, refused: map[string]string{}, known: k}
}

// OnChange sets what is told after every change of Removed (the runtime
// stops or restarts its overlay and names). Set it before the first
// answer.
func (s *Standing) OnChange(f func(removed bool)) {
	s.mu.Lock()
	s.changed = f
	s.mu.Unlock()
}

// Removed reports whether the node is judged removed by its cluster.
func (s *Standing) Removed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removed
}

// RemovedState is what status shows of a node judged removed.
type RemovedState struct {
	Err     error     // coded codes.RemovedByCluster, with what it was judged on
	Since   time.Time // when
	Asked   time.Time // the last ask since (Since before the first)
	NextAsk time.Time // the earliest next ask
	Asks    int       // asks since
}

// State is the removal as status shows it; ok is false while the cluster
// knows the node.
func (s *Standing) State() (RemovedState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.removed {
		return RemovedState{}, false
	}
	return RemovedState{Err: s.errLocked(), Since: s.since, Asked: s.asked, NextAsk: s.asked.Add(RemovedRetry), Asks: s.rounds}, true
}

// Err is codes.RemovedByCluster with what the node was judged on, or nil
// while the cluster knows it.
func (s *Standing) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.removed {
		return nil
	}
	return s.errLocked()
}

func (s *Standing) errLocked() error {
	return codes.Wrap(codes.RemovedByCluster, fmt.Errorf("removed by the cluster: %s", s.why))
}

// Leaving says that the node is leaving its cluster on its own (`meshctl
// leave`, `join --force`): the refusals that follow are its own doing,
// not a removal, and judge nothing until Stay.
func (s *Standing) Leaving() {
	s.mu.Lock()
	s.leaving = true
	s.mu.Unlock()
}

// Stay undoes Leaving: the leave failed and the node stays a member.
func (s *Standing) Stay() {
	s.mu.Lock()
	s.leaving = false
	clear(s.refused)
	s.mu.Unlock()
}

// Answer records how the control node at addr, one of seeds (the control
// nodes this node asks now), answered a call only members are served: nil
// (accepted: the cluster knows this node), codes.NotMember (refused), or
// anything else (not an answer about membership: the run starts over).
// Every control node of seeds refusing in one run judges the node
// removed.
func (s *Standing) Answer(addr string, seeds []string, err error) {
	s.mu.Lock()
	switch {
	case s.leaving:
	case err == nil:
		clear(s.refused)
		if s.removed {
			s.restoreLocked(fmt.Sprintf("control node %s accepts it as a member again", addr))
			return
		}
	case codes.Of(err) == codes.NotMember:
		s.refused[addr] = err.Error()
		if !s.removed && len(seeds) > 0 && !slices.ContainsFunc(seeds, func(a string) bool { _, ok := s.refused[a]; return !ok }) {
			s.removeLocked(fmt.Sprintf("every control node it asks (%d) refuses it as not a member (%s)", len(seeds), s.refusalsLocked()))
			return
		}
	default:
		clear(s.refused)
	}
	s.mu.Unlock()
}

// Former records that this node's own record, in the copy it holds,
// reads state (left, removed or failed): it is removed, whatever the
// control nodes answer next, until one accepts it.
func (s *Standing) Former(state string) {
	s.mu.Lock()
	if s.removed || s.leaving {
		s.mu.Unlock()
		return
	}
	s.removeLocked("its own record reads " + state)
}

// Due reports whether a node judged removed may ask the control nodes
// again (RemovedRetry after its last ask), and if so counts the ask. A
// node the cluster knows is never due here: it asks as it always does.
func (s *Standing) Due() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.removed || s.now().Sub(s.asked) < RemovedRetry {
		return false
	}
	s.asked = s.now()
	s.rounds++
	clear(s.refused) // one ask, one run
	return true
}

// Known is closed while the cluster knows this node; a node judged
// removed gets a channel that is closed when it is known again.
func (s *Standing) Known() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known
}

// removedPoll is how often a node judged removed looks whether its next
// ask is due.
const removedPoll = time.Second

// awaitKnown returns once the cluster knows this node again, or when ctx
// ends. Meanwhile, due (nil: none) is called whenever an ask is due
// (RemovedRetry after the last, on the node's clock, looked at every
// removedPoll) and not yet made: it wakes the pass that asks (Refresh),
// which otherwise waits for the follow loop's tick or a gossip event.
func (s *Standing) awaitKnown(ctx context.Context, due func()) {
	tick := time.NewTicker(removedPoll)
	defer tick.Stop()
	known := s.Known()
	for {
		select {
		case <-ctx.Done():
			return
		case <-known:
			return
		case <-tick.C:
			if due != nil && s.isDue() {
				due()
			}
		}
	}
}

// isDue is Due without counting an ask.
func (s *Standing) isDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removed && s.now().Sub(s.asked) >= RemovedRetry
}

// removeLocked judges the node removed and unlocks s: one error line,
// then the runtime is told.
func (s *Standing) removeLocked(why string) {
	s.removed, s.why = true, why
	s.since = s.now()
	s.asked, s.rounds = s.since, 0
	s.known = make(chan struct{})
	err, f := s.errLocked(), s.changed
	s.mu.Unlock()
	s.log.Error("the cluster no longer knows this node: its overlay and names are stopped; it asks the control nodes again at most once a minute",
		"code", codes.RemovedByCluster, "err", err, "remedy", codes.RemovedByCluster.Remedy())
	if f != nil {
		f(true)
	}
}

// restoreLocked judges the node known again and unlocks s.
func (s *Standing) restoreLocked(why string) {
	s.removed, s.why = false, ""
	close(s.known)
	f := s.changed
	s.mu.Unlock()
	s.log.Info("the cluster knows this node again: its overlay and names start again", "why", why)
	if f != nil {
		f(false)
	}
}

// refusalsLocked is the run's refusals, one per control node, sorted.
func (s *Standing) refusalsLocked() string {
	out := make([]string, 0, len(s.refused))
	for _, r := range s.refused {
		out = append(out, r)
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// askRound GETs path from the control nodes in turn until one answers,
// as control.Client.AskSeeds does, telling the standing each answer: one
// round. Every control node refusing this node is codes.NotMember; none
// answering is codes.SeedsUnreachable.
func (c *Copies) askRound(ctx context.Context, path string, out any) error {
	seeds := c.Seeds()
	var lastErr error = errors.New("no control node known")
	refused := 0
	for _, seed := range seeds {
		err := c.client.Call(ctx, seed, path, false, nil, out)
		c.standing.Answer(seed, seeds, err)
		if err == nil {
			return nil
		}
		if codes.Of(err) == codes.NotMember {
			refused++
		}
		lastErr = err
	}
	if refused > 0 && refused == len(seeds) {
		return codes.Wrap(codes.NotMember, fmt.Errorf("every control node refused this node: %w", lastErr))
	}
	return codes.Wrap(codes.SeedsUnreachable, fmt.Errorf("no control node answered: %v", lastErr))
}

// judgeOwn tells the standing when this node's own record (own, if ok)
// reads left, removed or failed.
func (c *Copies) judgeOwn(own control.NodeRecord, ok bool) {
	if ok && own.StateOf().Former() {
		c.standing.Former(own.State)
	}
}
