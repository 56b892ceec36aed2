package agent

import (
	"errors"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// caHandoff is POST /v0/ca/handoff: custody of the CA keys moves to
// req.Node (control.Plane.Handoff). A copy the old holder could not
// delete yet is a warning: a later pass deletes it.
func (a *Agent) caHandoff(r *http.Request, req apitype.CAHandoffRequest) (apitype.CACustody, error) {
	ctl, err := a.controlPlane()
	if err == nil && req.Node == "" {
		err = codes.Wrap(codes.BadRequest, errors.New("name the node to hand the CA to"))
	}
	if err != nil {
		return apitype.CACustody{}, err
	}
	h, err := ctl.Handoff(r.Context(), req.Node, a.operator(r.Context()))
	if err != nil {
		return apitype.CACustody{}, err
	}
	out := apitype.CACustody{From: h.From, To: h.To, Already: h.Already, Released: h.Released, Took: h.Took}
	if h.ReleaseErr != nil {
		out.Warnings = append(out.Warnings, apitype.Warning{Code: codes.OrInternal(h.ReleaseErr),
			Detail: "custody moved; this node's copy of the keys is deleted by a later pass: " + h.ReleaseErr.Error()})
	}
	return out, nil
}
