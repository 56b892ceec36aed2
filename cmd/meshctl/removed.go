package main

import (
	"fmt"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// stateCell is status' state row: "removed by the cluster" for a node its
// cluster no longer knows (apitype.StateRemoved), else the state as sent.
func stateCell(s *apitype.Status) string {
	if s.State == apitype.StateRemoved {
		return "removed by the cluster"
	}
	return s.State
}

// removedRows are status' rows of a node its cluster no longer knows: the
// code and its cause, what it was judged on, the remedy, and when meshd
// asks the control nodes again (at most once a minute).
func removedRows(row func(k, v string), s *apitype.Status) {
	if s.State != apitype.StateRemoved {
		return
	}
	if e := s.Error; e != nil {
		row("removed", fmt.Sprintf("%s: %s", e.ErrCode, e.Cause))
		row("why", e.Detail)
		row("remedy", e.Remedy)
	}
	if r := s.Removed; r != nil {
		row("removed since", r.Since.UTC().Format(time.RFC3339))
		row("asks again", fmt.Sprintf("%s at the earliest (asked %d times since)", r.NextAsk.UTC().Format(time.RFC3339), r.Asks))
	}
}
