package apitype

import "time"

// StateRemoved is Status.State of a node its cluster no longer knows
// (issue 52 item 9): meshd runs, but every control node it asked refused
// it as not a member, or its own record reads removed, left or failed.
// Its overlay and names are stopped; Status.Error carries
// codes.RemovedByCluster with the remedy, Status.Removed when it asks
// again.
const StateRemoved = "removed"

// Removed is when a node was judged removed by its cluster and when it
// asks the control nodes again (at most once a minute).
type Removed struct {
	Since   time.Time `json:"since"`
	Asked   time.Time `json:"asked"`    // the last ask (Since before the first)
	NextAsk time.Time `json:"next_ask"` // the earliest next ask
	Asks    int       `json:"asks"`     // asks since
}
