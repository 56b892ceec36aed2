package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// The local API's calls that a control node answers from its control
// plane (a worker answers codes.NotControl).

// Admit mints a one-time join token on a control node
// (control.Plane.Admit).
func (h api) postAdmit(r *http.Request, req apitype.AdmitRequest) (_ *apitype.AdmitResponse, err error) {
	defer func() { h.a.met.ObserveAdmit(err) }() // meshd_admissions_total
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.Admit(r.Context(), req, h.a.operator(r.Context()))
}

// RevokeToken revokes an unused join token on a control node
// (control.Plane.RevokeToken).
func (h api) postRevokeToken(r *http.Request) (*apitype.RevokeResponse, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.RevokeToken(r.Context(), r.PathValue("id"), h.a.operator(r.Context()))
}

// Approve approves, on a control node, the join of a node minted with
// `admit --approve` that waits with the code its joiner shows
// (control.Plane.Approve); the operator is the actor.
func (h api) postApprove(r *http.Request, req apitype.ApproveRequest) (*apitype.ApproveResponse, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	req.Name = h.a.nodeArg(req.Name)
	return ctl.Approve(r.Context(), req, h.a.operator(r.Context()))
}

// RotateKeys replaces the cluster's gossip key from this control node
// (control.Plane.RotateKeys): the operator's `meshctl keys rotate`.
func (h api) postRotateKeys(r *http.Request) (*apitype.KeyRotation, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	k, err := ctl.RotateKeys(r.Context(), h.a.operator(r.Context()))
	if err != nil {
		return nil, err
	}
	return &apitype.KeyRotation{Keys: k.Keys, PrimaryKey: k.Primary, Members: k.Members, Took: k.Took}, nil
}

// RotateCA is `meshctl ca rotate [--now]`, on the CA holder only: it
// creates the next CA (or resumes the rotation in progress with the one
// under ca/next/) and drives the rotation (control.Plane.RotateCA).
// CAStatus is `meshctl ca status` (control nodes).
// Remove takes a dead or unwanted node out of the cluster from a control
// node and shows convergence: who acknowledged the revocation within wait
// (control.Plane.RemoveAndConfirm).
func (h api) postRemove(r *http.Request, req apitype.RemoveRequest) (*apitype.RemoveResponse, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.RemoveAndConfirm(r.Context(), h.a.nodeArg(r.PathValue("name")), h.a.operator(r.Context()), req.Wait)
}

// postForget is POST /v0/nodes/{name}/forget: a former node's record
// dropped now (control nodes).
func (h api) postForget(r *http.Request) (*apitype.ForgetResponse, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.Forget(r.Context(), h.a.nodeArg(r.PathValue("name")), h.a.operator(r.Context()))
}

// getNodes lists the cluster from this node's raft, or asks a control node.
func (h api) getTokens(r *http.Request) ([]apitype.Token, error) {
	ctx := r.Context()
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.Tokens(ctx)
}

// caBackup is POST /v0/ca/backup: it seals the CA with the passphrase in
// the request. The passphrase is never logged; the sealed bytes go back
// to meshctl, which writes the file with the operator's rights (meshd,
// confined by its unit, cannot write where the operator chooses).
// caRestore is POST /v0/ca/restore: the sealed CA opened with the
// passphrase becomes this node's, when the holder on record is lost.
// caHandoff is POST /v0/ca/handoff: custody of the CA keys moves to
// req.Node (control.Plane.Handoff). A copy the old holder could not
// delete yet is a warning: a later pass deletes it.
// version is GET /v0/version: this meshd's version, commit and Go
// version, for `meshctl version` to compare with its own.
// getAudit answers the audit trail of a control node; ?since=DURATION
// keeps the events of the last DURATION.
func (h api) getAudit(r *http.Request) ([]apitype.AuditEvent, error) {
	var since time.Duration
	if v := r.URL.Query().Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("since %q: want a positive duration such as 90m or 24h", v))
		}
		since = d
	}
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.Audit(r.Context(), since)
}

func (h api) getTunnels(r *http.Request) (apitype.TunnelMap, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return apitype.TunnelMap{}, err
	}
	return ctl.TunnelMap(r.Context()), nil
}
