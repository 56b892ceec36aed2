package member

import (
	"time"

	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/codes"
)

// A gossip member this node ignores (desired.Unmatched: no active record
// with its id, or tags that disagree with its record) is, nearly always, a
// node joining: it starts gossiping before its record reaches every node.
// Logged as a warning at once, that was one WARN per join on every node
// (2,508 in one 100-node formation, issue 54 item 6), which teaches
// operators to skip WARN. So a member is a warning (codes.GossipMemberIgnored)
// only once it has stayed unmatched, for the same reason, for
// ignoredGrace; before that a debug line says it. A forged member (a
// taken machine gossiping as a control node) stays unmatched: it is
// warned about ignoredGrace after it appeared (e2e.TestGossipTrust).

// ignoredGrace is how long a gossip member may stay unmatched before it
// is a warning: a join's record reaches every node within a few seconds.
const ignoredGrace = 10 * time.Second

// ignoredSeen is one unmatched member: why, since when, and whether it was
// warned about.
type ignoredSeen struct {
	why    string
	since  time.Time
	warned bool
}

// ignoredBook sorts one look's unmatched members into those to log at
// debug (new, or with a new reason) and those to warn about (unmatched
// for the same reason for ignoredGrace, not yet warned), and says when
// the next warning falls due (zero: none pending). A member matched again
// is forgotten. Not safe for concurrent use (the caller holds ignoredMu).
func ignoredBook(seen map[string]ignoredSeen, now time.Time, unmatched []desired.Ignored) (debug, warn []desired.Ignored, due time.Time) {
	cur := make(map[string]bool, len(unmatched))
	for _, ig := range unmatched {
		cur[ig.Name] = true
		why := ig.ID + "|" + ig.Reason
		s, ok := seen[ig.Name]
		if !ok || s.why != why {
			s = ignoredSeen{why: why, since: now}
			debug = append(debug, ig)
		}
		if !s.warned {
			if at := s.since.Add(ignoredGrace); !now.Before(at) {
				s.warned = true
				warn = append(warn, ig)
			} else if due.IsZero() || at.Before(due) {
				due = at
			}
		}
		seen[ig.Name] = s
	}
	for name := range seen {
		if !cur[name] {
			delete(seen, name)
		}
	}
	return debug, warn, due
}

// reportIgnored logs the gossip members desired ignores (see above) and,
// while a warning is pending, pokes the overlay loop when it falls due.
// find, when not nil, finds the active records (the overlay's tracker:
// O(1) each), and in.Records is not read.
func (rt *Runtime) reportIgnored(in desired.Inputs, find func(id string) (*desired.Record, bool)) {
	if !in.RecordsKnown {
		return
	}
	ov := rt.ov
	ov.ignoredMu.Lock()
	defer ov.ignoredMu.Unlock()
	if ov.ignored == nil {
		ov.ignored = map[string]ignoredSeen{}
	}
	now := time.Now()
	var unmatched []desired.Ignored
	if find != nil {
		unmatched = desired.UnmatchedBy(in, find)
	} else {
		unmatched = desired.Unmatched(in)
	}
	debug, warn, due := ignoredBook(ov.ignored, now, unmatched)
	for _, ig := range debug {
		ov.log.Debug("gossip member not matched to a record (yet): raft decides, gossip only reports liveness",
			"member", ig.Name, "member_id", ig.ID, "reason", ig.Reason)
	}
	for _, ig := range warn {
		ov.log.Warn("gossip member ignored: raft decides, gossip only reports liveness", "code", codes.GossipMemberIgnored,
			"member", ig.Name, "member_id", ig.ID, "reason", ig.Reason, "for", ignoredGrace)
	}
	if !due.IsZero() && (ov.ignoredDue.IsZero() || due.Before(ov.ignoredDue) || !ov.ignoredDue.After(now)) {
		ov.ignoredDue = due
		time.AfterFunc(due.Sub(now), rt.poke)
	}
}
