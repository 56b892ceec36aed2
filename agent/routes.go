package agent

import (
	"net/http"
	"slices"
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
	l, h := a.log, api{a}
	return []localapi.Route{
		{Method: "GET", Path: apitype.PathStatus, Write: read, Handler: localapi.Do(l, "", h.getStatus)},
		{Method: "GET", Path: apitype.PathVersion, Write: read, Handler: localapi.Do(l, "", h.version)}, // version.go
		{Method: "GET", Path: apitype.PathNodes, Write: read, Handler: localapi.Do(l, "", h.getNodes)},
		{Method: "GET", Path: apitype.PathTokens, Write: read, Handler: localapi.Do(l, "", h.getTokens)},
		{Method: "GET", Path: apitype.PathAudit, Write: read, Handler: localapi.Do(l, "", h.getAudit)},
		{Method: "POST", Path: apitype.PathInit, Write: write, Handler: localapi.With(l, "init failed", h.postInit)},
		{Method: "POST", Path: apitype.PathAdmit, Write: write, Handler: localapi.With(l, "admit failed", h.postAdmit)},
		{Method: "POST", Path: apitype.PathJoin, Write: write, Handler: h.handleJoin},
		{Method: "POST", Path: apitype.PathJoinPlan, Write: write, Handler: h.handlePlan},
		{Method: "POST", Path: apitype.PathReload, Write: write, Handler: localapi.Do(l, "", h.postReload)},
		{Method: "POST", Path: apitype.PathLeave, Write: write, Handler: localapi.Do(l, "leave failed", h.postLeave)},
		{Method: "POST", Path: apitype.PathRemove, Write: write, Handler: localapi.With(l, "remove failed", h.postRemove)},
		{Method: "POST", Path: apitype.PathForget, Write: write, Handler: localapi.Do(l, "forget failed", h.postForget)},
		{Method: "POST", Path: apitype.PathRevokeToken, Write: write, Handler: localapi.Do(l, "token revocation failed", h.postRevokeToken)},
		{Method: "POST", Path: apitype.PathKeysRotate, Write: write, Handler: localapi.Do(l, "gossip key rotation failed", h.postRotateKeys)},
		{Method: "POST", Path: apitype.PathApprove, Write: write, Handler: localapi.With(l, "approve failed", h.postApprove)},
		{Method: "POST", Path: apitype.PathCAHandoff, Write: write, Handler: localapi.With(l, "CA handoff failed", h.caHandoff)},  // custody.go
		{Method: "POST", Path: apitype.PathCABackup, Write: write, Handler: localapi.With(l, "CA backup failed", h.caBackup)},     // cabackup.go
		{Method: "POST", Path: apitype.PathCARestore, Write: write, Handler: localapi.With(l, "CA restore refused", h.caRestore)}, // cabackup.go
		{Method: "POST", Path: apitype.PathCARotate, Write: write, Handler: localapi.With(l, "CA rotation failed", h.postRotateCA)},
		{Method: "GET", Path: apitype.PathCAStatus, Write: read, Handler: localapi.Do(l, "", h.getCAStatus)},
		{Method: "POST", Path: apitype.PathPing, Write: read, Handler: localapi.With(l, "", h.postPing)}, // ping.go: a read, as `meshctl ping` needs no privileges
		{Method: "GET", Path: apitype.PathNetcheck, Write: read, Handler: localapi.Do(l, "", h.getNetcheck)},
		{Method: "GET", Path: apitype.PathTunnels, Write: read, Handler: localapi.Do(l, "", h.getTunnels)},
		{Method: "GET", Path: apitype.PathRoutes, Write: read, Handler: localapi.Do(l, "", h.getRoutes)},                                         // subnetsapi.go
		{Method: "POST", Path: apitype.PathRoutesAdvertise, Write: write, Handler: localapi.With(l, "routes advertise failed", h.postAdvertise)}, // subnetsapi.go
		{Method: "POST", Path: apitype.PathRoutesApprove, Write: write, Handler: localapi.With(l, "route approval failed", h.postApproveRoute)},
		{Method: "POST", Path: apitype.PathRoutesWithdraw, Write: write, Handler: localapi.With(l, "route withdrawal failed", h.postWithdrawRoute)},
		{Method: "POST", Path: apitype.PathRoutesPrefer, Write: write, Handler: localapi.With(l, "carrier move failed", h.postPreferCarrier)},
		{Method: "GET", Path: apitype.PathExit, Write: read, Handler: localapi.Do(l, "", h.getExit)},                             // subnetsapi.go
		{Method: "POST", Path: apitype.PathExit, Write: write, Handler: localapi.With(l, "exit node change failed", h.postExit)}, // subnetsapi.go
	}
}

// api is the local API's handlers: what each door does, over the agent.
// Adding a door is a row of localRoutes and a method here (or in the
// file of its concern).
type api struct{ a *Agent }

// localHandler serves localRoutes behind the local API's guard.
func (a *Agent) localHandler() http.Handler {
	return localapi.Handler(a.localRoutes(), localapi.Options{Version: a.d.Version, SocketGroup: a.cfg.SocketGroup})
}

func (h api) getStatus(r *http.Request) (apitype.Status, error) { return h.a.status(r.Context()), nil }

func (h api) postInit(r *http.Request, req apitype.InitRequest) (*apitype.InitResponse, error) {
	return h.a.Init(r.Context(), req)
}

// handleJoin streams one JSON line per step and ends with a result or an
// error line. Errors found before the first step get a plain error response.
func (h api) handleJoin(w http.ResponseWriter, r *http.Request) {
	var req apitype.JoinRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	emit := apitype.StreamLines[apitype.JoinLine](w)
	res, err := joiner{h.a}.Join(r.Context(), req, emit)
	if err != nil {
		c := codes.OrInternal(err)
		h.a.log.Warn("join failed", "code", c, "err", err)
		emit(apitype.JoinLine{Error: apitype.NewError(c, err)})
		return
	}
	emit(apitype.JoinLine{Result: res})
}

// handlePlan is POST /v0/join/plan (plan.go): streamed like a join, a
// check a line, then the result or the error that kept it from running.
func (h api) handlePlan(w http.ResponseWriter, r *http.Request) {
	var req apitype.JoinRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	send := apitype.StreamLines[apitype.PlanLine](w)
	res, err := joiner{h.a}.Plan(r.Context(), req, func(c apitype.PlanCheck) { send(apitype.PlanLine{Check: &c}) })
	if err != nil {
		c := codes.OrInternal(err)
		h.a.log.Warn("join plan could not run", "code", c, "err", err)
		send(apitype.PlanLine{Error: apitype.NewError(c, err)})
		return
	}
	send(apitype.PlanLine{Result: res})
}

// postReload is POST /v0/reload (reload.go): the warnings as a JSON
// array, or the coded error of a config that was refused (logged by
// Reload itself).
func (h api) postReload(*http.Request) ([]apitype.Warning, error) {
	ws, err := h.a.Reload()
	if err == nil && ws == nil {
		ws = []apitype.Warning{}
	}
	return ws, err
}

func (h api) postLeave(r *http.Request) (struct{}, error) { return struct{}{}, h.a.Leave(r.Context()) }

// postPing is one probe (member.Runtime.Ping).
func (h api) postPing(r *http.Request, req apitype.PingRequest) (apitype.PingReply, error) {
	rt, err := h.a.running()
	if err != nil {
		return apitype.PingReply{}, err
	}
	req.Name = rt.NodeName(req.Name) // w1.prod.mesh is w1 (names.go)
	return rt.Ping(r.Context(), req)
}

// getNetcheck is the path check against the control nodes
// (member.Runtime.Netcheck).
func (h api) getNetcheck(r *http.Request) (*apitype.NetcheckReport, error) {
	rt, err := h.a.running()
	if err != nil {
		return nil, err
	}
	return rt.Netcheck(r.Context())
}

// getTunnels is the cluster-wide tunnel view of a control node
// (tunnels.go); a worker answers codes.NotControl.

func (h api) getNodes(r *http.Request) ([]apitype.Node, error) {
	ctx := r.Context()
	rt, err := h.a.running()
	if err != nil {
		return nil, err
	}
	var rows []apitype.Node
	rows, err = rt.NodeRows(ctx)
	for i := range rows {
		rows[i].Self = rows[i].ID == rt.Facts().NodeID
	}
	if r.URL.Query().Get("all") != "1" {
		// Former nodes departed longer ago than former_retention are
		// hidden (issue 52); `meshctl nodes --all` shows them.
		now := time.Now()
		rows = slices.DeleteFunc(rows, func(n apitype.Node) bool { return n.Hidden(now, h.a.cfg.FormerRetention) })
	}
	return rows, err
}

func (h api) version(*http.Request) (apitype.Build, error) {
	return apitype.NewBuild(h.a.d.Version, h.a.d.Commit), nil
}
