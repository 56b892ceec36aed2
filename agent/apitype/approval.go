package apitype

import "time"

// PathApprove is POST /v0/approve (a control node): an operator approves
// the join of a node minted with `admit --approve`, with the code the
// joining machine shows (ApproveRequest → ApproveResponse).
const PathApprove = "/v0/approve"

// ApproveRequest is POST /v0/approve.
type ApproveRequest struct {
	Name string `json:"name"`
	Code string `json:"code"` // the 6 digits the joiner shows
}

// ApproveResponse says which waiting join the code approved.
type ApproveResponse struct {
	Name    string `json:"name"`
	TokenID string `json:"token_id"`
	Source  string `json:"source"` // the joiner's address as the seed saw it
	Via     string `json:"via"`    // the control node the joiner talks to
	Actor   string `json:"actor"`
}

// TokenApproval is a token row's approval state (tokens minted with
// --approve): waiting (with the sessions that wait), approved, or burnt.
// The codes themselves are never shown here: the operator reads the code
// off the joining machine.
type TokenApproval struct {
	State      string            `json:"state"` // none yet, waiting, approved, burnt
	Waiting    []ApprovalWaiting `json:"waiting,omitempty"`
	Wrong      int               `json:"wrong,omitempty"` // wrong codes so far (5 burn the token)
	ApprovedBy string            `json:"approved_by,omitempty"`
	Source     string            `json:"source,omitempty"` // the approved join's
}

// ApprovalWaiting is one join that waits for approval.
type ApprovalWaiting struct {
	Source string    `json:"source"`
	Via    string    `json:"via"`
	Since  time.Time `json:"since"`
}

// The states of a TokenApproval.
const (
	ApprovalStateNone     = "none yet"
	ApprovalStateWaiting  = "waiting"
	ApprovalStateApproved = "approved"
	ApprovalStateBurnt    = "burnt"
)

// JoinApproval is the join line that shows the approval code: the join
// waits until an operator types it into `meshctl approve NAME CODE` on a
// control node, or the token expires.
type JoinApproval struct {
	Name    string    `json:"name"`
	Code    string    `json:"code"`
	Seed    string    `json:"seed"`
	Expires time.Time `json:"expires"`
}

// WaitingJoin is a join that waits for approval, as `meshctl status`
// shows it on a control node.
type WaitingJoin struct {
	Name    string    `json:"name"`
	TokenID string    `json:"token_id"`
	Source  string    `json:"source"`
	Via     string    `json:"via"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"` // the token's
}
