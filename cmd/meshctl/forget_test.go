package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// TestForget (issue 52 item 2): `meshctl forget NAME` asks the daemon to
// drop a former node's record and says what stays; a refusal keeps its
// code; `nodes --all` asks for every record, `nodes` for those within the
// retention.
func TestForget(t *testing.T) {
	var (
		mu    sync.Mutex
		asked []string
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v0/nodes/{name}/forget", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		if r.PathValue("name") == "w2" {
			writeJSON(w, codes.NodeNotFormer.Status(), apitype.NewError(codes.NodeNotFormer, nil))
			return
		}
		writeJSON(w, http.StatusOK, apitype.ForgetResponse{Name: "w1", ID: "n-1", State: "left", OverlayIP: "10.42.0.5", Revocations: 2})
	})
	mux.HandleFunc("GET /v0/nodes", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		writeJSON(w, http.StatusOK, []apitype.Node{})
	})
	sock := localclienttest.Serve(t, hostChecked(mux))

	r := meshctl(t, "--socket", sock, "forget", "w1")
	if r.exit != exitOK || !strings.Contains(r.stdout, "w1 forgotten (it was left, node id n-1)") ||
		!strings.Contains(r.stdout, "revocations of its 2 certificates stay") {
		t.Fatalf("forget w1: exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
	}
	r = meshctl(t, "--socket", sock, "forget", "w1", "-o", "json")
	var got apitype.ForgetResponse
	if r.exit != exitOK || json.Unmarshal([]byte(r.stdout), &got) != nil || got.Revocations != 2 || got.State != "left" {
		t.Fatalf("forget -o json: exit %d, %+v\n%s", r.exit, got, r.stdout)
	}
	r = meshctl(t, "--socket", sock, "forget", "w2")
	if r.exit != exitFailure || !strings.HasPrefix(r.stderr, string(codes.NodeNotFormer)) {
		t.Fatalf("forget a member: exit %d, stderr:\n%s", r.exit, r.stderr)
	}
	if r := meshctl(t, "--socket", sock, "forget"); r.exit != exitUsage {
		t.Fatalf("forget without a name: exit %d", r.exit)
	}
	for _, argv := range [][]string{{"nodes"}, {"nodes", "--all"}} {
		if r := meshctl(t, append([]string{"--socket", sock}, argv...)...); r.exit != exitOK {
			t.Fatalf("%v: exit %d\n%s", argv, r.exit, r.stderr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/v0/nodes/w1/forget", "/v0/nodes/w1/forget", "/v0/nodes/w2/forget", "/v0/nodes", "/v0/nodes?all=1"}
	if strings.Join(asked, " ") != strings.Join(want, " ") {
		t.Fatalf("asked %v, want %v", asked, want)
	}
}

// hostChecked is h behind the local API's Host check, as fakeMeshd does.
func hostChecked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != apitype.Host {
			writeJSON(w, http.StatusForbidden, apitype.NewError(codes.PermissionDenied, nil))
			return
		}
		h.ServeHTTP(w, r)
	})
}
