package apitype

import "time"

// The CA custody paths of the local API (issue 13), control nodes only.
const (
	// PathCAHandoff is POST /v0/ca/handoff: move CA custody from this
	// node (the holder) to another control voter.
	PathCAHandoff = "/v0/ca/handoff"
)

// CAHandoffRequest names the node custody moves to.
type CAHandoffRequest struct {
	Node string `json:"node"`
}

// CACustody is the outcome of a handoff or a restore.
type CACustody struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Already: the record named To before the call (a re-run finished
	// the move).
	Already bool `json:"already,omitempty"`
	// Released: the old holder deleted its copy of the keys.
	Released bool          `json:"released"`
	Warnings []Warning     `json:"warnings,omitempty"`
	Took     time.Duration `json:"took_ns"`
}
