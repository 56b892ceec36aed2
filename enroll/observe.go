package enroll

import (
	"errors"
	"time"

	"github.com/meshd/meshd/codes"
)

// Outcomes of a join request that are not refusals (Deps.Observe).
const (
	OutcomeOK      = "ok"
	OutcomePending = "pending" // waits for an operator's approval
)

// observed starts timing a join request (at start, from the wall clock:
// the cost of serving it, whatever Deps.Now says); the func it returns reports the
// request's outcome, read from *err when the handler returns.
func (s *Server) observed(start time.Time) func(err *error) {
	return func(err *error) {
		if s.observe == nil {
			return
		}
		s.observe(Outcome(*err), time.Since(start)) // wall time, not the injected clock
	}
}

// Outcome names what a join request's error means for Deps.Observe:
// OutcomeOK for nil, OutcomePending while it waits for approval, else the
// error's code (codes.Internal for an uncoded one), so the label's values
// are bounded by the code table.
func Outcome(err error) string {
	var pending errPending
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &pending):
		return OutcomePending
	}
	return codes.OrInternal(err).String()
}
