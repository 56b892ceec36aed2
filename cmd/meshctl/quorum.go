package main

import (
	"fmt"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// quorumRows adds the quorum lines of `meshctl status` on a raft voter:
// how many voters this node reaches against how many a quorum needs, then
// one line per voter. The warnings (NoLeaderWarning, QuorumAtRisk) come
// from meshd with the status.
func quorumRows(row func(k, v string), q *apitype.Quorum) {
	if q == nil {
		return
	}
	row("quorum", fmt.Sprintf("%d of %d voters reachable, %d needed", q.Reachable, len(q.Voters), q.Needed))
	for _, v := range q.Voters {
		row("  "+v.Name, voterState(v))
	}
}

// voterState is one voter's line: leader, following (and since when it
// last heard from a leader), or unreachable and why.
func voterState(v apitype.Voter) string {
	var s string
	switch {
	case !v.Reachable:
		s = "unreachable"
		if v.Error != "" {
			s += " (" + v.Error + ")"
		}
	case v.Leader:
		s = "leader"
	case v.LastContactMS < 0:
		s = "follower, no contact with a leader"
	default:
		s = "follower, last contact " + (time.Duration(v.LastContactMS) * time.Millisecond).String() + " ago"
	}
	if v.Self {
		s += ", this node"
	}
	return s
}
