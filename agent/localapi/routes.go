package localapi

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// Route is one door of the local API: its method and path (a
// net/http pattern, "/v0/nodes/{name}/remove"), whether it changes
// anything (then only root, meshd's user or the socket group may call
// it: MayWrite), and its handler. Adding a route is one Route in the
// agent's table and its handler; the guard, the write check, decoding,
// logging a failure's code and writing the answer are here, once.
type Route struct {
	Method  string
	Path    string
	Write   bool
	Handler http.HandlerFunc
}

// Options are what the guard needs to know.
type Options struct {
	Version     string // sent on every answer (apitype.VersionHeader)
	SocketGroup string // the group MayWrite lets write
}

// Handler serves routes behind the guard: a request that a browser could
// have sent (an Origin or Referer header, a Host other than
// apitype.Host) is refused with codes.PermissionDenied before any route
// sees it, and a Write route refuses a caller MayWrite refuses. Every
// answer carries meshd's version.
func Handler(routes []Route, o Options) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		h := rt.Handler
		if rt.Write {
			h = writeOnly(h, o.SocketGroup)
		}
		mux.HandleFunc(rt.Method+" "+rt.Path, h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(apitype.VersionHeader, o.Version)
		if r.Host != apitype.Host || r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
			apitype.WriteError(w, codes.Wrap(codes.PermissionDenied, errors.New("request not from a local client")))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// writeOnly lets h run only for a caller that may change state.
func writeOnly(h http.HandlerFunc, socketGroup string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := MayWrite(ActorFrom(r.Context()), socketGroup); err != nil {
			apitype.WriteError(w, err)
			return
		}
		h(w, r)
	}
}

// Do is a handler for a call without a body: f's answer as JSON with 200,
// or its coded error with the code's status. A failure is logged at warn
// with its code under the message failed, unless failed is empty (a read
// whose refusal the caller shows).
func Do[Resp any](log *slog.Logger, failed string, f func(r *http.Request) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := f(r)
		answer(w, log, failed, resp, err)
	}
}

// With is Do for a call whose body is a JSON Req (apitype.DecodeBody: at
// most 64 KiB, unknown fields refused with codes.BadRequest, before f
// runs).
func With[Req, Resp any](log *slog.Logger, failed string, f func(r *http.Request, req Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := apitype.DecodeBody(r, &req); err != nil {
			apitype.WriteError(w, err)
			return
		}
		resp, err := f(r, req)
		answer(w, log, failed, resp, err)
	}
}

func answer[Resp any](w http.ResponseWriter, log *slog.Logger, failed string, resp Resp, err error) {
	if err != nil {
		if failed != "" {
			log.Warn(failed, "code", codes.OrInternal(err), "err", err)
		}
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, resp)
}
