package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localapi"
	"github.com/meshd/meshd/codes"
)

// Whether a route changes anything: a write needs root, meshd's user or
// the socket group (localapi.MayWrite).
const (
	read  = false
	write = true
)

// localRoutes is the local API on the unix socket (STYLE §6), one row a
// door: method, path, read or write, and its handler. The handlers are
// here when they only call one method, otherwise in the file of their
// concern (named in the row); docs/architecture.md's route table names
// each handler's file, and TestLocalRoutesDocumented keeps it true.
func (a *Agent) localRoutes() []localapi.Route {
	l := a.log
	return []localapi.Route{
		{Method: "GET", Path: apitype.PathStatus, Write: read, Handler: localapi.Do(l, "", a.getStatus)},
		{Method: "GET", Path: apitype.PathVersion, Write: read, Handler: localapi.Do(l, "", a.version)}, // version.go
		{Method: "GET", Path: apitype.PathNodes, Write: read, Handler: localapi.Do(l, "", a.getNodes)},
		{Method: "GET", Path: apitype.PathTokens, Write: read, Handler: localapi.Do(l, "", a.getTokens)},
		{Method: "GET", Path: apitype.PathAudit, Write: read, Handler: localapi.Do(l, "", a.getAudit)},
		{Method: "POST", Path: apitype.PathInit, Write: write, Handler: localapi.With(l, "init failed", a.postInit)},
		{Method: "POST", Path: apitype.PathAdmit, Write: write, Handler: localapi.With(l, "admit failed", a.postAdmit)},
		{Method: "POST", Path: apitype.PathJoin, Write: write, Handler: a.handleJoin},
		{Method: "POST", Path: apitype.PathJoinPlan, Write: write, Handler: a.handlePlan},
		{Method: "POST", Path: apitype.PathReload, Write: write, Handler: localapi.Do(l, "", a.postReload)},
		{Method: "POST", Path: apitype.PathLeave, Write: write, Handler: localapi.Do(l, "leave failed", a.postLeave)},
		{Method: "POST", Path: apitype.PathRemove, Write: write, Handler: localapi.With(l, "remove failed", a.postRemove)},
		{Method: "POST", Path: apitype.PathRevokeToken, Write: write, Handler: localapi.Do(l, "token revocation failed", a.postRevokeToken)},
		{Method: "POST", Path: apitype.PathKeysRotate, Write: write, Handler: localapi.Do(l, "gossip key rotation failed", a.postRotateKeys)},
		{Method: "POST", Path: apitype.PathApprove, Write: write, Handler: localapi.With(l, "approve failed", a.postApprove)},
		{Method: "POST", Path: apitype.PathCAHandoff, Write: write, Handler: localapi.With(l, "CA handoff failed", a.caHandoff)},  // custody.go
		{Method: "POST", Path: apitype.PathCABackup, Write: write, Handler: localapi.With(l, "CA backup failed", a.caBackup)},     // cabackup.go
		{Method: "POST", Path: apitype.PathCARestore, Write: write, Handler: localapi.With(l, "CA restore refused", a.caRestore)}, // cabackup.go
		{Method: "POST", Path: apitype.PathCARotate, Write: write, Handler: localapi.With(l, "CA rotation failed", a.postRotateCA)},
		{Method: "GET", Path: apitype.PathCAStatus, Write: read, Handler: localapi.Do(l, "", a.getCAStatus)},
		{Method: "POST", Path: apitype.PathPing, Write: read, Handler: localapi.With(l, "", a.postPing)}, // ping.go: a read, as `meshctl ping` needs no privileges
		{Method: "GET", Path: apitype.PathTunnels, Write: read, Handler: localapi.Do(l, "", a.getTunnels)},
	}
}

// localHandler serves localRoutes behind the local API's guard.
func (a *Agent) localHandler() http.Handler {
	return localapi.Handler(a.localRoutes(), localapi.Options{Version: a.d.Version, SocketGroup: a.cfg.SocketGroup})
}

func (a *Agent) getStatus(r *http.Request) (apitype.Status, error) { return a.status(r.Context()), nil }

func (a *Agent) getNodes(r *http.Request) ([]apitype.Node, error) { return a.nodes(r.Context()) }

func (a *Agent) getTokens(r *http.Request) ([]apitype.Token, error) { return a.tokens(r.Context()) }

// getAudit answers the audit trail of a control node; ?since=DURATION
// keeps the events of the last DURATION.
func (a *Agent) getAudit(r *http.Request) ([]apitype.AuditEvent, error) {
	var since time.Duration
	if v := r.URL.Query().Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("since %q: want a positive duration such as 90m or 24h", v))
		}
		since = d
	}
	ctl, err := a.controlPlane()
	if err != nil {
		return nil, err
	}
	return ctl.Audit(r.Context(), since)
}

func (a *Agent) postInit(r *http.Request, req apitype.InitRequest) (*apitype.InitResponse, error) {
	return a.Init(r.Context(), req)
}

func (a *Agent) postAdmit(r *http.Request, req apitype.AdmitRequest) (*apitype.AdmitResponse, error) {
	return a.Admit(r.Context(), req, a.operator(r.Context()))
}

// handleJoin streams one JSON line per step and ends with a result or an
// error line. Errors found before the first step get a plain error response.
func (a *Agent) handleJoin(w http.ResponseWriter, r *http.Request) {
	var req apitype.JoinRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	emit := apitype.StreamLines[apitype.JoinLine](w)
	res, err := a.Join(r.Context(), req, emit)
	if err != nil {
		c := codes.OrInternal(err)
		a.log.Warn("join failed", "code", c, "err", err)
		emit(apitype.JoinLine{Error: apitype.NewError(c, err)})
		return
	}
	emit(apitype.JoinLine{Result: res})
}

// handlePlan is POST /v0/join/plan (plan.go): streamed like a join, a
// check a line, then the result or the error that kept it from running.
func (a *Agent) handlePlan(w http.ResponseWriter, r *http.Request) {
	var req apitype.JoinRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	send := apitype.StreamLines[apitype.PlanLine](w)
	res, err := a.Plan(r.Context(), req, func(c apitype.PlanCheck) { send(apitype.PlanLine{Check: &c}) })
	if err != nil {
		c := codes.OrInternal(err)
		a.log.Warn("join plan could not run", "code", c, "err", err)
		send(apitype.PlanLine{Error: apitype.NewError(c, err)})
		return
	}
	send(apitype.PlanLine{Result: res})
}

// postReload is POST /v0/reload (reload.go): the warnings as a JSON
// array, or the coded error of a config that was refused (logged by
// Reload itself).
func (a *Agent) postReload(*http.Request) ([]apitype.Warning, error) {
	ws, err := a.Reload()
	if err == nil && ws == nil {
		ws = []apitype.Warning{}
	}
	return ws, err
}

func (a *Agent) postLeave(r *http.Request) (struct{}, error) { return struct{}{}, a.Leave(r.Context()) }

func (a *Agent) postRemove(r *http.Request, req apitype.RemoveRequest) (*apitype.RemoveResponse, error) {
	return a.Remove(r.Context(), r.PathValue("name"), a.operator(r.Context()), req.Wait)
}

func (a *Agent) postRevokeToken(r *http.Request) (*apitype.RevokeResponse, error) {
	return a.RevokeToken(r.Context(), r.PathValue("id"), a.operator(r.Context()))
}

func (a *Agent) postRotateKeys(r *http.Request) (*apitype.KeyRotation, error) {
	return a.RotateKeys(r.Context(), a.operator(r.Context()))
}

// postApprove is POST /v0/approve; the code is never logged.
func (a *Agent) postApprove(r *http.Request, req apitype.ApproveRequest) (*apitype.ApproveResponse, error) {
	return a.Approve(r.Context(), req, a.operator(r.Context()))
}

func (a *Agent) postRotateCA(r *http.Request, req apitype.CARotateRequest) (*apitype.CAStatus, error) {
	return a.RotateCA(r.Context(), req.Now, a.operator(r.Context()))
}

func (a *Agent) getCAStatus(r *http.Request) (*apitype.CAStatus, error) {
	return a.CAStatus(r.Context())
}

// postPing is one probe (member.Runtime.Ping).
func (a *Agent) postPing(r *http.Request, req apitype.PingRequest) (apitype.PingReply, error) {
	rt, err := a.running()
	if err != nil {
		return apitype.PingReply{}, err
	}
	return rt.Ping(r.Context(), req)
}

// getTunnels is the cluster-wide tunnel view of a control node
// (tunnels.go); a worker answers codes.NotControl.
func (a *Agent) getTunnels(r *http.Request) (apitype.TunnelMap, error) {
	ctl, err := a.controlPlane()
	if err != nil {
		return apitype.TunnelMap{}, err
	}
	return ctl.TunnelMap(r.Context()), nil
}
