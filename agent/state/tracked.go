package state

import (
	"errors"
	"fmt"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// RequestsKept bounds the table of applied request ids.
const RequestsKept = 1024

// Tracked carries a command with a request id, so that a write retried
// after a lost leader (whose first attempt may have committed) is applied
// at most once: a repeated id returns the first attempt's result.
type Tracked struct {
	ReqID string `json:"req_id"`
	Inner []byte `json:"inner"` // Encode(cmd) of the command itself
}

// Track wraps c with reqID.
func Track(reqID string, c Command) (Tracked, error) {
	if reqID == "" {
		return Tracked{}, errors.New("track: empty request id")
	}
	inner, err := Encode(c)
	if err != nil {
		return Tracked{}, err
	}
	return Tracked{ReqID: reqID, Inner: inner}, nil
}

// RequestResult is the remembered outcome of one tracked request.
type RequestResult struct {
	ID     string `json:"id"`
	Result string `json:"result"` // "" success, "ip-taken", or the code of the failure
}

const resultIPTaken = "ip-taken"

func (t Tracked) applyTo(s *Snapshot) error {
	if t.ReqID == "" {
		return codes.Wrap(codes.BadRequest, errors.New("tracked command without a request id"))
	}
	for _, r := range s.Requests {
		if r.ID == t.ReqID {
			return replay(r)
		}
	}
	c, err := Decode(t.Inner)
	if err != nil {
		return err
	}
	if _, nested := c.(Tracked); nested {
		return codes.Wrap(codes.BadRequest, errors.New("tracked command inside a tracked command"))
	}
	err = s.apply(c)
	r := RequestResult{ID: t.ReqID}
	switch {
	case err == nil:
	case errors.Is(err, enroll.ErrIPTaken):
		r.Result = resultIPTaken
	default:
		r.Result = string(codes.OrInternal(err))
	}
	s.Requests = append(s.Requests, r)
	if len(s.Requests) > RequestsKept {
		s.Requests = s.Requests[len(s.Requests)-RequestsKept:]
	}
	return err
}

// replay rebuilds the first attempt's result for a repeated request.
func replay(r RequestResult) error {
	switch r.Result {
	case "":
		return nil
	case resultIPTaken:
		return enroll.ErrIPTaken
	}
	return codes.Wrap(codes.Code(r.Result), fmt.Errorf("request %s was already applied and failed", r.ID))
}
