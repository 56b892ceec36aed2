package localclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// fakeMeshd answers the local API with func-field handlers; a nil field is a 404.
type fakeMeshd struct {
	status func(w http.ResponseWriter, r *http.Request)
	nodes  func(w http.ResponseWriter, r *http.Request)
	join   func(w http.ResponseWriter, r *http.Request)
}

func (f *fakeMeshd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var h func(http.ResponseWriter, *http.Request)
	switch r.URL.Path {
	case apitype.PathStatus:
		h = f.status
	case apitype.PathNodes:
		h = f.nodes
	case apitype.PathJoin:
		h = f.join
	}
	if h == nil {
		http.NotFound(w, r)
		return
	}
	h(w, r)
}

// shortDir is a temp dir short enough for a unix socket path (< 100 bytes);
// t.TempDir() can be too long.

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeCoded(w http.ResponseWriter, c codes.Code, detail string) {
	writeJSON(w, c.Status(), apitype.NewError(c, errors.New(detail)))
}

func statusHandler(s apitype.Status) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s) }
}

func TestStatus(t *testing.T) {
	want := apitype.Status{State: "running", Version: "1.2.3", Cluster: "prod", Node: "n1", Role: "control",
		Warnings: []apitype.Warning{{Code: codes.ClockSkew, Detail: "2s"}}}
	sock := localclienttest.Serve(t, &fakeMeshd{status: statusHandler(want)})
	c := &localclient.Client{Socket: sock}
	got, err := c.Status(t.Context())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if got.State != want.State || got.Version != want.Version || got.Cluster != want.Cluster ||
		got.Node != want.Node || got.Role != want.Role || !slices.Equal(got.Warnings, want.Warnings) {
		t.Fatalf("Status = %+v, want %+v", got, want)
	}
}

func TestHeaders(t *testing.T) {
	var host, ver atomic.Value
	sock := localclienttest.Serve(t, &fakeMeshd{status: func(w http.ResponseWriter, r *http.Request) {
		host.Store(r.Host)
		ver.Store(r.Header.Get(apitype.VersionHeader))
		writeJSON(w, http.StatusOK, apitype.Status{State: "running"})
	}})
	c := &localclient.Client{Socket: sock, Version: "9.8.7"}
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("Status: %v", err)
	}
	if got := host.Load(); got != apitype.Host {
		t.Errorf("Host = %v, want %q", got, apitype.Host)
	}
	if got := ver.Load(); got != "9.8.7" {
		t.Errorf("%s = %v, want %q", apitype.VersionHeader, got, "9.8.7")
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		want    codes.Code
	}{
		{"fail/coded-json", func(w http.ResponseWriter, _ *http.Request) {
			writeCoded(w, codes.NotInCluster, "no cluster yet")
		}, codes.NotInCluster},
		{"fail/coded-json-status-differs", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusInternalServerError, apitype.NewError(codes.Busy, nil)) // the body's code wins
		}, codes.Busy},
		{"fail/non-json-500", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "panic: oops", http.StatusInternalServerError)
		}, codes.Internal},
		{"fail/json-without-code", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": "upstream"})
		}, codes.Internal},
		{"fail/empty-404", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
		}, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := localclienttest.Serve(t, &fakeMeshd{status: tt.handler})
			c := &localclient.Client{Socket: sock}
			_, err := c.Status(t.Context())
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("codes.Of(%v) = %q, want %q", err, got, tt.want)
			}
			e, ok := errors.AsType[*apitype.Error](err)
			if !ok {
				t.Fatalf("error %T is not an *apitype.Error", err)
			}
			if e.Code() != tt.want || e.Cause != tt.want.Cause() || e.Remedy != tt.want.Remedy() {
				t.Fatalf("error = %+v, want code %q with its cause and remedy", e, tt.want)
			}
			if errors.Is(err, localclient.ErrUnreachable) {
				t.Fatal("an answering daemon was reported unreachable")
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	tests := []struct {
		name string
		sock func(t *testing.T) string
	}{
		{"fail/no-socket", func(t *testing.T) string { return filepath.Join(localclienttest.ShortDir(t), "nothing") }},
		{"fail/no-dir", func(t *testing.T) string { return filepath.Join(localclienttest.ShortDir(t), "gone", "s") }},
		{"fail/stale-socket", func(t *testing.T) string {
			sock := filepath.Join(localclienttest.ShortDir(t), "s")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			_ = ln.Close()
			return sock
		}},
		{"fail/not-a-socket", func(t *testing.T) string {
			p := filepath.Join(localclienttest.ShortDir(t), "f")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &localclient.Client{Socket: tt.sock(t)}
			_, err := c.Status(t.Context())
			if got := codes.Of(err); got != codes.DaemonUnreachable {
				t.Fatalf("codes.Of(%v) = %q, want %q", err, got, codes.DaemonUnreachable)
			}
			if !errors.Is(err, localclient.ErrUnreachable) {
				t.Fatalf("errors.Is(%v, ErrUnreachable) = false", err)
			}
		})
	}
}

func TestZeroClientUsesDefaultSocket(t *testing.T) {
	var dialed atomic.Value
	c := &localclient.Client{Dial: func(_ context.Context, network, addr string) (net.Conn, error) {
		dialed.Store(network + ":" + addr)
		return nil, errors.New("no dialing in tests")
	}}
	_, err := c.Status(t.Context())
	if got := codes.Of(err); got != codes.DaemonUnreachable {
		t.Fatalf("codes.Of(%v) = %q, want %q", err, got, codes.DaemonUnreachable)
	}
	if got := dialed.Load(); got != "unix:"+localclient.DefaultSocket {
		t.Fatalf("dialed %v, want unix:%s", got, localclient.DefaultSocket)
	}
}

// joinStream writes each line as its own flushed chunk.
func joinStream(lines ...apitype.JoinLine) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		for _, l := range lines {
			_ = enc.Encode(l)
			w.(http.Flusher).Flush()
		}
	}
}

func TestJoin(t *testing.T) {
	step := func(s string) apitype.JoinLine { return apitype.JoinLine{Step: s} }
	warn := apitype.JoinLine{Warning: &apitype.Warning{Code: codes.ClockSkew, Detail: "4s"}}
	result := &apitype.JoinResult{Cluster: "prod", ClusterID: "c-1", Node: "w1", NodeID: "n-2", Role: "worker", OverlayIP: "10.42.0.2"}
	tests := []struct {
		name      string
		handler   func(http.ResponseWriter, *http.Request)
		wantLines []apitype.JoinLine
		wantCode  codes.Code // "" for success
	}{
		{"ok/steps-then-result",
			joinStream(step("contacting seed"), warn, step("enrolled"), apitype.JoinLine{Result: result}),
			[]apitype.JoinLine{step("contacting seed"), warn, step("enrolled")}, ""},
		{"ok/result-only", joinStream(apitype.JoinLine{Result: result}), nil, ""},
		{"fail/error-line",
			joinStream(step("contacting seed"), apitype.JoinLine{Error: apitype.NewError(codes.TokenConsumed, errors.New("used by w0"))}),
			[]apitype.JoinLine{step("contacting seed")}, codes.TokenConsumed},
		{"fail/no-result", joinStream(step("contacting seed"), step("enrolled")),
			[]apitype.JoinLine{step("contacting seed"), step("enrolled")}, codes.JoinUnconfirmed},
		{"fail/empty-stream", joinStream(), nil, codes.JoinUnconfirmed},
		{"fail/stream-cut-after-step", func(w http.ResponseWriter, r *http.Request) {
			joinStream(step("enrolled"))(w, r)
			panic(http.ErrAbortHandler) // the connection drops without the final chunk
		}, []apitype.JoinLine{step("enrolled")}, codes.JoinUnconfirmed},
		{"fail/stream-cut-mid-line", func(w http.ResponseWriter, r *http.Request) {
			joinStream(step("enrolled"))(w, r)
			_, _ = io.WriteString(w, `{"step":"starting ove`)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // meshd died mid-line: the join's outcome is unknown
		}, []apitype.JoinLine{step("enrolled")}, codes.JoinUnconfirmed},
		{"fail/refused-before-stream", func(w http.ResponseWriter, _ *http.Request) {
			writeCoded(w, codes.AlreadyJoined, "member of prod")
		}, nil, codes.AlreadyJoined},
		{"fail/garbage-line", func(w http.ResponseWriter, r *http.Request) {
			joinStream(step("enrolled"))(w, r)
			_, _ = io.WriteString(w, "not json\n")
		}, []apitype.JoinLine{step("enrolled")}, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := make(chan apitype.JoinRequest, 1)
			sock := localclienttest.Serve(t, &fakeMeshd{join: func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					http.Error(w, "method", http.StatusMethodNotAllowed)
					return
				}
				var got apitype.JoinRequest
				_ = json.NewDecoder(r.Body).Decode(&got)
				reqs <- got
				tt.handler(w, r)
			}})
			c := &localclient.Client{Socket: sock}
			var lines []apitype.JoinLine
			req := apitype.JoinRequest{Token: "mshj1-secret", AdvertiseAddr: "127.0.0.9"}
			res, err := c.Join(t.Context(), req, func(l apitype.JoinLine) { lines = append(lines, l) })
			if got := codes.Of(err); got != tt.wantCode {
				t.Fatalf("codes.Of(%v) = %q, want %q", err, got, tt.wantCode)
			}
			if tt.wantCode == "" && (res == nil || *res != *result) {
				t.Errorf("result = %+v, want %+v", res, result)
			}
			if tt.wantCode != "" {
				if res != nil {
					t.Errorf("result %+v returned with an error", res)
				}
				if _, ok := errors.AsType[*apitype.Error](err); !ok {
					t.Errorf("error %T is not an *apitype.Error", err)
				}
			}
			if !joinLinesEqual(lines, tt.wantLines) {
				t.Errorf("steps = %+v, want %+v", lines, tt.wantLines)
			}
			select {
			case got := <-reqs:
				if got != req {
					t.Errorf("server got %+v, want %+v", got, req)
				}
			default:
				t.Error("the server saw no join request")
			}
		})
	}
}

func joinLinesEqual(a, b []apitype.JoinLine) bool {
	return slices.EqualFunc(a, b, func(x, y apitype.JoinLine) bool {
		if x.Step != y.Step || (x.Warning == nil) != (y.Warning == nil) || x.Result != nil || x.Error != nil {
			return false
		}
		return x.Warning == nil || *x.Warning == *y.Warning
	})
}

// Each step reaches the callback as it arrives, not when the stream ends:
// the server sends the result only after the client has seen the first step.
func TestJoinStreamsSteps(t *testing.T) {
	seen := make(chan struct{})
	sock := localclienttest.Serve(t, &fakeMeshd{join: func(w http.ResponseWriter, r *http.Request) {
		joinStream(apitype.JoinLine{Step: "one"})(w, r)
		select {
		case <-seen:
		case <-r.Context().Done():
			return
		}
		_ = json.NewEncoder(w).Encode(apitype.JoinLine{Result: &apitype.JoinResult{Node: "w1"}})
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := &localclient.Client{Socket: sock}
	res, err := c.Join(ctx, apitype.JoinRequest{Token: "t"}, func(l apitype.JoinLine) {
		if l.Step == "one" {
			close(seen)
		}
	})
	if err != nil || res == nil || res.Node != "w1" {
		t.Fatalf("Join = %+v, %v (code %q); a step was held back until the end of the stream", res, err, codes.Of(err))
	}
}

func TestWaitReady(t *testing.T) {
	// starting for the first n calls, then unjoined.
	startingFor := func(n int32, calls *atomic.Int32) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			state := "unjoined"
			if calls.Add(1) <= n {
				state = "starting"
			}
			writeJSON(w, http.StatusOK, apitype.Status{State: state, Version: "1"})
		}
	}
	t.Run("ok/after-three-starting", func(t *testing.T) {
		var calls atomic.Int32
		sock := localclienttest.Serve(t, &fakeMeshd{status: startingFor(3, &calls)})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		s, err := (&localclient.Client{Socket: sock}).WaitReady(ctx)
		if err != nil {
			t.Fatalf("WaitReady: %v", err)
		}
		if s.State != "unjoined" || calls.Load() != 4 {
			t.Fatalf("state %q after %d calls, want unjoined after 4", s.State, calls.Load())
		}
	})
	t.Run("ok/already-ready", func(t *testing.T) {
		var calls atomic.Int32
		sock := localclienttest.Serve(t, &fakeMeshd{status: startingFor(0, &calls)})
		s, err := (&localclient.Client{Socket: sock}).WaitReady(t.Context())
		if err != nil || s.State != "unjoined" || calls.Load() != 1 {
			t.Fatalf("WaitReady = %+v, %v after %d calls", s, err, calls.Load())
		}
	})
	// The deadline below falls in the 160 ms backoff after the fifth poll
	// (polls at about 0, 10, 30, 70, 150 and 310 ms), not during a request.
	const deadline = 240 * time.Millisecond
	t.Run("fail/deadline-while-starting", func(t *testing.T) {
		var calls atomic.Int32
		sock := localclienttest.Serve(t, &fakeMeshd{status: startingFor(1<<30, &calls)})
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		s, err := (&localclient.Client{Socket: sock}).WaitReady(ctx)
		if got := codes.Of(err); got != codes.DaemonStarting || s != nil {
			t.Fatalf("WaitReady = %+v, %v (code %q), want code %q", s, err, got, codes.DaemonStarting)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("errors.Is(%v, DeadlineExceeded) = false", err)
		}
	})
	t.Run("fail/deadline-while-unreachable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		c := &localclient.Client{Socket: filepath.Join(localclienttest.ShortDir(t), "nothing")}
		_, err := c.WaitReady(ctx)
		if got := codes.Of(err); got != codes.DaemonUnreachable {
			t.Fatalf("codes.Of(%v) = %q, want %q", err, got, codes.DaemonUnreachable)
		}
	})
	// meshd answered "starting" and then hangs: the deadline ends a request
	// in flight. The error must still carry a code (meshctl shows Internal
	// for an uncoded one).
	t.Run("fail/deadline-during-request", func(t *testing.T) {
		var calls atomic.Int32
		sock := localclienttest.Serve(t, &fakeMeshd{status: func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				writeJSON(w, http.StatusOK, apitype.Status{State: "starting"})
				return
			}
			<-r.Context().Done()
		}})
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		_, err := (&localclient.Client{Socket: sock}).WaitReady(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("errors.Is(%v, DeadlineExceeded) = false", err)
		}
		if got := codes.Of(err); got != codes.DaemonStarting {
			t.Fatalf("codes.Of(%v) = %q, want %q", err, got, codes.DaemonStarting)
		}
	})
}
