package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

type echo struct {
	Name string `json:"name"`
}

// TestHandler: the guard refuses what a browser could send before any
// route runs, a write route refuses a caller MayWrite refuses, bodies are
// decoded strictly, and a handler's coded error is answered with its
// code and status; every answer carries the version.
func TestHandler(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ran := 0
	routes := []Route{
		{Method: "GET", Path: "/v0/read", Handler: Do(log, "", func(*http.Request) (echo, error) { ran++; return echo{"r"}, nil })},
		{Method: "POST", Path: "/v0/write", Write: true, Handler: With(log, "write failed", func(_ *http.Request, e echo) (echo, error) {
			ran++
			if e.Name == "" {
				return echo{}, codes.Wrap(codes.BadRequest, errors.New("no name"))
			}
			return e, nil
		})},
	}
	h := Handler(routes, Options{Version: "v9", SocketGroup: "nonexistent-group-for-test"})
	root := WithActor(context.Background(), Actor{UID: 0, Known: true})
	call := func(ctx context.Context, method, path, body string, mod func(*http.Request)) (*httptest.ResponseRecorder, apitype.Error) {
		t.Helper()
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
		req.Host = apitype.Host
		if mod != nil {
			mod(req)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if v := rec.Header().Get(apitype.VersionHeader); v != "v9" {
			t.Errorf("%s %s: version header %q, want v9", method, path, v)
		}
		var e apitype.Error
		if rec.Code != http.StatusOK {
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
		}
		return rec, e
	}
	for name, mod := range map[string]func(*http.Request){
		"origin":  func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") },
		"referer": func(r *http.Request) { r.Header.Set("Referer", "http://evil.example/") },
		"host":    func(r *http.Request) { r.Host = "localhost:80" },
	} {
		if rec, e := call(root, "GET", "/v0/read", "", mod); e.ErrCode != codes.PermissionDenied || rec.Code != codes.PermissionDenied.Status() {
			t.Errorf("guard/%s: %d %s, want %s", name, rec.Code, e.ErrCode, codes.PermissionDenied)
		}
	}
	if ran != 0 {
		t.Fatalf("a refused request reached its route %d times", ran)
	}
	if rec, _ := call(context.Background(), "GET", "/v0/read", "", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"name":"r"`) {
		t.Errorf("read by an unknown caller: %d %s, want 200", rec.Code, rec.Body)
	}
	stranger := WithActor(context.Background(), Actor{UID: 12345, GID: 12345, Known: true})
	if _, e := call(stranger, "POST", "/v0/write", `{"name":"x"}`, nil); e.ErrCode != codes.PermissionDenied {
		t.Errorf("write by a stranger: %s, want %s", e.ErrCode, codes.PermissionDenied)
	}
	if rec, _ := call(root, "POST", "/v0/write", `{"name":"x"}`, nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"name":"x"`) {
		t.Errorf("write by root: %d %s", rec.Code, rec.Body)
	}
	if _, e := call(root, "POST", "/v0/write", `{"name":"x","extra":1}`, nil); e.ErrCode != codes.BadRequest {
		t.Errorf("unknown field: %s, want %s", e.ErrCode, codes.BadRequest)
	}
	if rec, e := call(root, "POST", "/v0/write", `{}`, nil); e.ErrCode != codes.BadRequest || rec.Code != codes.BadRequest.Status() {
		t.Errorf("handler's coded error: %d %s, want %s", rec.Code, e.ErrCode, codes.BadRequest)
	}
}
