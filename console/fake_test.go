package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// fakeMeshd is a stand-in for meshd's local API with the routes the console
// calls; it records every write.
type fakeMeshd struct {
	mu        sync.Mutex
	status    apitype.Status
	nodes     []apitype.Node
	tokens    []apitype.Token
	audit     []apitype.AuditEvent
	tunnels   apitype.TunnelMap // GET /v0/tunnels, as a control node merges it
	admits    []apitype.AdmitRequest
	revokes   []string
	approves  []apitype.ApproveRequest
	removes   []string
	queries   []string              // every read's path and query
	failPaths map[string]codes.Code // path → the error meshd answers with (reads)
	// failWith answers any route of the path with this error, as a meshd
	// newer than this console may (its own code, cause and remedy).
	failWith map[string]*apitype.Error
}

// The fake's node ids, 32 hex characters as meshd makes them.
const (
	idCP1 = "53981b1e72498e0216f8b6580b59350c"
	idW1  = "c645e29d95c639ad125caf2322f946f7"
	idW2  = "0b6e4f1c2d3a4b5c6d7e8f9a0b1c2d3e"
)

// secretToken is what the fake's admit mints: the tests look for it on
// every page.
const secretToken = "MESHD-TOKEN-v1-secretsecretsecret"

func newFake() *fakeMeshd {
	now := time.Now()
	return &fakeMeshd{
		status: apitype.Status{State: "running", Version: "1.2.3", Cluster: "prod", ClusterID: "c1", Node: "cp1",
			Role: "control", Raft: "leader", Leader: "cp1", OverlayIP: "10.42.0.1",
			// A lighthouse, as meshd reports one: Lighthouse set, and its
			// own IP not among the lighthouses it knows (the others).
			Overlay: &apitype.Overlay{Mode: "userspace", Lighthouse: true, Lighthouses: []string{},
				Tunnels: []apitype.Tunnel{{OverlayIP: "10.42.0.2", Remote: "192.0.2.2:4242", Name: "w1"},
					{OverlayIP: "10.42.0.3", Remote: "192.0.2.3:4242", Name: "w2"}}},
			Approvals: []apitype.WaitingJoin{{Name: "w9", TokenID: "aaaabbbbcccc", Source: "192.0.2.9", Via: "cp1", Since: now, Expires: now.Add(time.Hour)}}},
		nodes: []apitype.Node{
			{Name: "cp1", ID: idCP1, Role: "control", State: "active", Gossip: "alive", OverlayIP: "10.42.0.1", Raft: "leader", Version: "1.2.3", Self: true},
			{Name: "w1", ID: idW1, Role: "worker", State: "active", Gossip: "alive", OverlayIP: "10.42.0.2", OverlayIP6: "fd5a:1b2c:3d4e::2", Raft: "none", Version: "1.2.3",
				Underlay: "192.168.7.10", SeenFrom: "203.0.113.7", BehindNAT: true, Tunnel: &apitype.PingPath{Relay: "w2", RelayIP: "10.42.0.3"}},
			{Name: "w2", ID: idW2, Role: "worker", State: "active", Gossip: "failed", OverlayIP: "10.42.0.3", Raft: "none", Version: "1.2.2", LastSeen: now.Add(-time.Minute),
				Underlay: "198.51.100.20", SeenFrom: "198.51.100.20", Relay: true},
		},
		tokens: []apitype.Token{
			{ID: "0123456789ab", Name: "w5", Role: "worker", Created: now, Expires: now.Add(15 * time.Minute), MintedBy: "uid=0@cp1", State: apitype.TokenUnused},
			{ID: "aaaabbbbcccc", Name: "w9", Role: "worker", Created: now.Add(-time.Minute), Expires: now.Add(time.Hour), MintedBy: "uid=0@cp1", State: apitype.TokenUnused,
				Approval: &apitype.TokenApproval{State: apitype.ApprovalStateWaiting}},
			{ID: "ba9876543210", Name: "w1", Role: "worker", Created: now.Add(-time.Hour), Expires: now, MintedBy: "uid=0@cp1", State: apitype.TokenUsed, ConsumedBy: "w1"},
		},
		audit: []apitype.AuditEvent{
			{At: now.Add(-time.Hour), Code: "X200000ADMIT", Event: "admit", Actor: "uid=0@cp1", Subject: "w1"},
			{At: now, Code: "X200000REMOVE", Event: "remove", Actor: "uid=1000@cp1", Subject: "w3"},
		},
		// cp1 and w1 report each other; only cp1 reports w2 (w2 failed,
		// its report dropped); w1 reports a relayed tunnel to w2.
		tunnels: apitype.TunnelMap{
			Edges: []apitype.TunnelEdge{
				{A: "cp1", B: "w1", SeenFrom: []string{"cp1", "w1"}, Paths: []apitype.TunnelPath{
					{From: "cp1", Remote: "192.0.2.2:4242"}, {From: "w1", Remote: "192.0.2.1:4242"}}},
				{A: "cp1", B: "w2", SeenFrom: []string{"cp1"}, Paths: []apitype.TunnelPath{{From: "cp1", Remote: "192.0.2.3:4242"}}},
				{A: "w1", B: "w2", SeenFrom: []string{"w1"}, Paths: []apitype.TunnelPath{{From: "w1", Relayed: true}}},
			},
			Nodes: []apitype.TunnelNode{
				{Name: "cp1", Role: "control", Reported: true, ReportedAt: now, Tunnels: 2},
				{Name: "w1", Role: "worker", Reported: true, ReportedAt: now, Tunnels: 2},
				{Name: "w2", Role: "worker", Problem: "gossip: failed"},
			},
		},
		failPaths: map[string]codes.Code{},
		failWith:  map[string]*apitype.Error{},
	}
}

func (f *fakeMeshd) handler() http.Handler {
	mux := http.NewServeMux()
	read := func(path string, get func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.queries = append(f.queries, r.URL.RequestURI())
			if c, ok := f.failPaths[path]; ok {
				apitype.WriteError(w, codes.Wrap(c, nil))
				return
			}
			apitype.WriteJSON(w, http.StatusOK, get())
		})
	}
	read(apitype.PathStatus, func() any { return f.status })
	read(apitype.PathNodes, func() any { return f.nodes })
	read(apitype.PathTokens, func() any { return f.tokens })
	read(apitype.PathAudit, func() any { return f.audit })
	read(apitype.PathTunnels, func() any { return f.tunnels })
	mux.HandleFunc("POST "+apitype.PathAdmit, func(w http.ResponseWriter, r *http.Request) {
		var req apitype.AdmitRequest
		if err := apitype.DecodeBody(r, &req); err != nil {
			apitype.WriteError(w, err)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.admits = append(f.admits, req)
		if req.Name == "taken" {
			apitype.WriteError(w, codes.Wrap(codes.NameTaken, errors.New("node taken is active")))
			return
		}
		apitype.WriteJSON(w, http.StatusOK, apitype.AdmitResponse{Token: secretToken, ID: "feedfacecafe", Name: req.Name,
			Role: req.Role, Expires: time.Now().Add(req.TTL), Command: "meshctl join " + secretToken, Approve: req.Approve, Groups: req.Groups})
	})
	mux.HandleFunc("POST "+apitype.PathRevokeToken, func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.PathValue("id")
		f.revokes = append(f.revokes, id)
		for i := range f.tokens {
			if f.tokens[i].ID == id {
				already := f.tokens[i].State == apitype.TokenRevoked
				f.tokens[i].State = apitype.TokenRevoked
				apitype.WriteJSON(w, http.StatusOK, apitype.RevokeResponse{Token: f.tokens[i], AlreadyRevoked: already})
				return
			}
		}
		apitype.WriteError(w, codes.Wrap(codes.TokenUnknown, fmt.Errorf("no token %s", id)))
	})
	mux.HandleFunc("POST "+apitype.PathApprove, func(w http.ResponseWriter, r *http.Request) {
		var req apitype.ApproveRequest
		if err := apitype.DecodeBody(r, &req); err != nil {
			apitype.WriteError(w, err)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.approves = append(f.approves, req)
		apitype.WriteJSON(w, http.StatusOK, apitype.ApproveResponse{Name: req.Name, TokenID: "aaaabbbbcccc", Source: "192.0.2.9", Via: "cp1", Actor: "uid=0@cp1"})
	})
	mux.HandleFunc("POST "+apitype.PathRemove, func(w http.ResponseWriter, r *http.Request) {
		var req apitype.RemoveRequest
		if err := apitype.DecodeBody(r, &req); err != nil {
			apitype.WriteError(w, err)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		name := r.PathValue("name")
		f.removes = append(f.removes, name)
		for i := range f.nodes {
			if f.nodes[i].Name == name {
				f.nodes[i].State = "removed"
				apitype.WriteJSON(w, http.StatusOK, apitype.RemoveResponse{Name: name, Version: 7, Acked: []string{"cp1"}, Pending: []string{"w2"}, Bound: 5 * time.Second})
				return
			}
		}
		apitype.WriteError(w, codes.Wrap(codes.NodeUnknown, nil))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		e := f.failWith[r.URL.Path]
		f.mu.Unlock()
		if e != nil {
			apitype.WriteJSON(w, http.StatusConflict, e)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (f *fakeMeshd) writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.admits) + len(f.revokes) + len(f.approves) + len(f.removes)
}

// consoleRun is a console serving on a free loopback port in front of a
// fake meshd, until the test ends.
type consoleRun struct {
	t      *testing.T
	srv    *Server
	fake   *fakeMeshd
	base   string // http://127.0.0.1:PORT
	cookie *http.Cookie
	csrf   string
}

func startConsole(t *testing.T, fake *fakeMeshd) *consoleRun {
	t.Helper()
	sock := localclienttest.Serve(t, fake.handler())
	srv, err := Listen("127.0.0.1:0", &localclient.Client{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5 s of its context ending")
		}
	})
	return &consoleRun{t: t, srv: srv, fake: fake, base: "http://" + srv.Addr()}
}

// noRedirect is a client that shows redirects instead of following them,
// and keeps no cookies: each test says which cookie it sends.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       10 * time.Second,
}

// do sends a request to the console and returns the status and body.
func (c *consoleRun) do(req *http.Request) (int, string, *http.Response) {
	c.t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp
}

func (c *consoleRun) request(method, path string, form url.Values) *http.Request {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return req
}

// login exchanges the URL's secret for the session cookie, as a browser
// opening the printed URL does, and reads the CSRF token off a page.
func (c *consoleRun) login() {
	c.t.Helper()
	status, _, resp := c.do(c.request("GET", strings.TrimPrefix(c.srv.URL(), c.base), nil))
	if status != http.StatusOK || resp.Header.Get("Refresh") != "0; url=/" {
		c.t.Fatalf("opening the URL: %d Refresh %q, want 200 moving on to /", status, resp.Header.Get("Refresh"))
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == c.srv.guard.cookie {
			c.cookie = ck
		}
	}
	if c.cookie == nil {
		c.t.Fatal("opening the URL set no session cookie")
	}
	_, body := c.get("/admit")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		c.t.Fatal("the admit page has no CSRF field")
	}
	c.csrf = m[1]
}

// get fetches path with the session cookie.
func (c *consoleRun) get(path string) (int, string) {
	c.t.Helper()
	req := c.request("GET", path, nil)
	req.AddCookie(c.cookie)
	status, body, _ := c.do(req)
	return status, body
}

// post sends form to path as the console's own page would: the session
// cookie, the CSRF token and the console's Origin.
func (c *consoleRun) post(path string, form url.Values) (int, string) {
	c.t.Helper()
	form.Set("csrf", c.csrf)
	req := c.request("POST", path, form)
	req.AddCookie(c.cookie)
	req.Header.Set("Origin", c.base)
	status, body, _ := c.do(req)
	return status, body
}

// wantRefused checks a refusal: the status of code c, and the code on the page.
func wantRefused(t *testing.T, what string, status int, body string, c codes.Code) {
	t.Helper()
	if status != c.Status() || !strings.Contains(body, string(c)) {
		t.Errorf("%s: %d, want %d with %s; body:\n%.600s", what, status, c.Status(), c, body)
	}
}

// reads is every read's path and query so far.
func (f *fakeMeshd) reads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.queries)
}
