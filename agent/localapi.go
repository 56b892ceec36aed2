package agent

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// localHandler is the local API on the unix socket (STYLE §6).
func (a *Agent) localHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+apitype.PathStatus, a.handleStatus)
	mux.HandleFunc("GET "+apitype.PathVersion, a.handleVersion) // version.go
	mux.HandleFunc("GET "+apitype.PathNodes, a.handleNodes)
	mux.HandleFunc("GET "+apitype.PathTokens, a.handleTokens)
	mux.HandleFunc("GET "+apitype.PathAudit, a.handleAudit)
	mux.HandleFunc("POST "+apitype.PathInit, a.write(a.handleInit))
	mux.HandleFunc("POST "+apitype.PathAdmit, a.write(a.handleAdmit))
	mux.HandleFunc("POST "+apitype.PathJoin, a.write(a.handleJoin))
	mux.HandleFunc("POST "+apitype.PathJoinPlan, a.write(a.handlePlan)) // plan.go
	mux.HandleFunc("POST "+apitype.PathReload, a.write(a.handleReload))
	mux.HandleFunc("POST "+apitype.PathLeave, a.write(a.handleLeave))
	mux.HandleFunc("POST "+apitype.PathRemove, a.write(a.handleRemove))
	mux.HandleFunc("POST "+apitype.PathRevokeToken, a.write(a.handleRevokeToken))
	mux.HandleFunc("POST "+apitype.PathKeysRotate, a.write(a.handleRotateKeys))
	mux.HandleFunc("POST "+apitype.PathApprove, a.write(a.handleApprove))     // approve.go
	mux.HandleFunc("POST "+apitype.PathCAHandoff, a.write(a.handleCAHandoff)) // custody.go
	mux.HandleFunc("POST "+apitype.PathCABackup, a.write(a.handleCABackup))
	mux.HandleFunc("POST "+apitype.PathCARestore, a.write(a.handleCARestore))
	mux.HandleFunc("POST "+apitype.PathCARotate, a.write(a.handleCARotate)) // carotation.go
	mux.HandleFunc("GET "+apitype.PathCAStatus, a.handleCAStatus)
	mux.HandleFunc("POST "+apitype.PathPing, a.handlePing)      // ping.go
	mux.HandleFunc("GET "+apitype.PathTunnels, a.handleTunnels) // tunnels.go
	return a.guard(mux)
}

// guard refuses what a browser could send (Origin, Referer, a foreign Host)
// and tags every response with meshd's version.
func (a *Agent) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(apitype.VersionHeader, a.d.Version)
		if r.Host != apitype.Host || r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
			apitype.WriteError(w, codes.Wrap(codes.PermissionDenied, errors.New("request not from a local client")))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// write allows a state-changing call only to root or the socket group.
func (a *Agent) write(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := mayWrite(actorFrom(r.Context()), a.cfg.SocketGroup); err != nil {
			apitype.WriteError(w, err)
			return
		}
		h(w, r)
	}
}

func (a *Agent) handleStatus(w http.ResponseWriter, r *http.Request) {
	apitype.WriteJSON(w, http.StatusOK, a.status(r.Context()))
}

func (a *Agent) handleNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := a.nodes(r.Context())
	if err != nil {
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, nodes)
}

func (a *Agent) handleTokens(w http.ResponseWriter, r *http.Request) {
	toks, err := a.tokens(r.Context())
	if err != nil {
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, toks)
}

// handleAudit answers the audit trail of a control node; ?since=DURATION
// keeps the events of the last DURATION.
func (a *Agent) handleAudit(w http.ResponseWriter, r *http.Request) {
	var since time.Duration
	if v := r.URL.Query().Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			apitype.WriteError(w, codes.Wrap(codes.BadRequest, fmt.Errorf("since %q: want a positive duration such as 90m or 24h", v)))
			return
		}
		since = d
	}
	ctl, err := a.controlPlane()
	if err != nil {
		apitype.WriteError(w, err)
		return
	}
	events, err := ctl.Audit(r.Context(), since)
	if err != nil {
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, events)
}

func (a *Agent) handleInit(w http.ResponseWriter, r *http.Request) {
	var req apitype.InitRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	resp, err := a.Init(r.Context(), req)
	if err != nil {
		a.log.Warn("init failed", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, resp)
}

func (a *Agent) handleAdmit(w http.ResponseWriter, r *http.Request) {
	var req apitype.AdmitRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	resp, err := a.Admit(r.Context(), req, a.operator(r.Context()))
	if err != nil {
		a.log.Warn("admit failed", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, resp)
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

func (a *Agent) handleLeave(w http.ResponseWriter, r *http.Request) {
	if err := a.Leave(r.Context()); err != nil {
		a.log.Warn("leave failed", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, struct{}{})
}

func (a *Agent) handleRemove(w http.ResponseWriter, r *http.Request) {
	var req apitype.RemoveRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	resp, err := a.Remove(r.Context(), r.PathValue("name"), a.operator(r.Context()), req.Wait)
	if err != nil {
		a.log.Warn("remove failed", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, resp)
}

func (a *Agent) handleRotateKeys(w http.ResponseWriter, r *http.Request) {
	resp, err := a.RotateKeys(r.Context(), a.operator(r.Context()))
	if err != nil {
		a.log.Warn("gossip key rotation failed", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, resp)
}

func (a *Agent) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	resp, err := a.RevokeToken(r.Context(), r.PathValue("id"), a.operator(r.Context()))
	if err != nil {
		a.log.Warn("token revocation failed", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, resp)
}
