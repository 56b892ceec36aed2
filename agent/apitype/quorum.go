package apitype

// Quorum is a control node's view of raft's quorum in GET /v0/status:
// the leader, each voter as this node reaches it, and how many voters a
// quorum needs. `meshctl status` warns (codes.NoLeaderWarning,
// codes.QuorumAtRisk) from it.
type Quorum struct {
	Leader    string  `json:"leader,omitempty"` // the leader's name; empty: none
	Voters    []Voter `json:"voters"`
	Reachable int     `json:"reachable"` // voters that answered this node (itself included)
	Needed    int     `json:"needed"`    // a majority of len(Voters)
}

// Voter is one raft voter in Quorum.
type Voter struct {
	Name      string `json:"name"`
	Self      bool   `json:"self,omitempty"`
	Leader    bool   `json:"leader,omitempty"`
	Reachable bool   `json:"reachable"`
	// LastContactMS is how long ago the voter last heard from a leader,
	// in milliseconds, as it reports it: -1 when it never did, when it
	// is the leader, or when it did not answer.
	LastContactMS int64 `json:"last_contact_ms"`
	// Error is why it did not answer (unreachable voters only).
	Error string `json:"error,omitempty"`
}
