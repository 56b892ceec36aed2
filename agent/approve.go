package agent

import (
	"context"
	"net/netip"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/enroll"
)

// Approve approves, on a control node, the join of a node minted with
// `admit --approve` that waits with the code its joiner shows
// (control.Plane.Approve); the operator is the actor.
func (a *Agent) Approve(ctx context.Context, req apitype.ApproveRequest, actor string) (*apitype.ApproveResponse, error) {
	ctl, err := a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.Approve(ctx, req, actor)
}

// joinEnrollDeps are the enroll client's collaborators for a join:
// enrollDeps, with the approval code of a token minted with --approve
// shown as a join line of its own.
func (a *Agent) joinEnrollDeps(underlay netip.Addr, step func(string, ...any), emit func(apitype.JoinLine)) enroll.ClientDeps {
	d := a.preflight().EnrollDeps(underlay, func(msg string) { step("%s", msg) }, func(w apitype.Warning) { emit(apitype.JoinLine{Warning: &w}) })
	d.Approval = func(s enroll.ApprovalShown) {
		emit(apitype.JoinLine{Approval: &apitype.JoinApproval{Name: s.Name, Code: s.Code, Seed: s.Seed, Expires: s.Expires}})
	}
	return d
}
