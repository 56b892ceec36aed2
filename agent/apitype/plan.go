package apitype

import "github.com/meshd/meshd/codes"

// PathJoinPlan is POST /v0/join/plan: `meshctl join --plan`. The body is a
// JoinRequest; the answer streams one PlanLine per check as it runs and
// ends with a PlanLine holding Result or Error. Nothing is written and the
// token stays unused.
const PathJoinPlan = "/v0/join/plan"

// CheckStatus is how a preflight check came out.
type CheckStatus string

const (
	CheckOK   CheckStatus = "ok"   // a real join would pass it
	CheckWarn CheckStatus = "warn" // it would pass, with a warning (Code is the warning's)
	CheckFail CheckStatus = "fail" // a real join would fail here, with Code
	CheckSkip CheckStatus = "skip" // not run: an earlier check it needs failed (Detail says which)
)

// PlanCheck is one preflight check of a join.
type PlanCheck struct {
	// Name is the check: token, identity, underlay, port gossip,
	// port nebula, port control, port raft, tun, state-dir,
	// seed HOST:PORT, clock, admission.
	Name   string      `json:"name"`
	Status CheckStatus `json:"status"`
	Code   codes.Code  `json:"code,omitempty"`
	Detail string      `json:"detail"`
}

// PlanResult ends a plan: OK only if a real join would pass every check.
type PlanResult struct {
	OK     bool        `json:"ok"`
	Checks []PlanCheck `json:"checks"`
	// Underlay is the address a join would advertise, UnderlayWhy how it
	// was chosen and Route the kernel's route it came from (if any).
	Underlay    string `json:"underlay_addr,omitempty"`
	UnderlayWhy string `json:"underlay_why,omitempty"`
	Route       string `json:"route,omitempty"`
}

// Failed is the first failed check, or nil.
func (r *PlanResult) Failed() *PlanCheck {
	for i := range r.Checks {
		if r.Checks[i].Status == CheckFail {
			return &r.Checks[i]
		}
	}
	return nil
}

// PlanLine is one line of the streamed POST /v0/join/plan answer: a check
// as it finishes, and finally Result (every check ran) or Error (the plan
// itself could not run: meshd busy or starting).
type PlanLine struct {
	Check  *PlanCheck  `json:"check,omitempty"`
	Result *PlanResult `json:"result,omitempty"`
	Error  *Error      `json:"error,omitempty"`
}
