package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// fakePing serves POST /v0/ping from a script of replies (nil: the
// daemon's NodeUnknown error) and records the requests.
type fakePing struct {
	mu      sync.Mutex
	replies []*apitype.PingReply
	reqs    []apitype.PingRequest
}

func (f *fakePing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != apitype.PathPing {
		http.NotFound(w, r)
		return
	}
	var req apitype.PingRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, apitype.NewError(codes.BadRequest, err))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i := len(f.reqs)
	f.reqs = append(f.reqs, req)
	if i >= len(f.replies) || f.replies[i] == nil {
		writeJSON(w, http.StatusNotFound, apitype.NewError(codes.NodeUnknown, nil))
		return
	}
	writeJSON(w, http.StatusOK, f.replies[i])
}

func reply(answered bool, rtt time.Duration) *apitype.PingReply {
	r := &apitype.PingReply{Name: "w1", OverlayIP: "10.42.0.3", Port: 7946, Answered: answered, Timeout: time.Second}
	if answered {
		r.Answer, r.RTT = "refused", rtt
	}
	return r
}

// TestPing: one line per probe with its RTT and the tunnel's path when
// meshd knows one (direct ADDR, relayed via NAME; in -o json per probe and
// the last one known), a summary, exit 0 when any probe was answered; PingLost (exit 1, summary still printed) when none
// was; NodeUnknown passed through; --port reaches the request; bad flags
// are usage errors.
func TestPing(t *testing.T) {
	t.Run("ok/some-lost", func(t *testing.T) {
		f := &fakePing{replies: []*apitype.PingReply{reply(true, 1500*time.Microsecond), reply(false, 0), reply(true, 500*time.Microsecond)}}
		r := meshctl(t, "--socket", localclienttest.Serve(t, f), "ping", "w1", "-c", "3", "-i", "10ms", "-W", "250ms")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
		}
		want := []string{
			"PING w1 (10.42.0.3): TCP probes to port 7946 over the overlay",
			"answer from w1 (10.42.0.3): probe=1 time=1.500 ms (refused)",
			"no answer from w1 (10.42.0.3): probe=2 timeout 1s",
			"answer from w1 (10.42.0.3): probe=3 time=0.500 ms (refused)",
			"--- w1 ping statistics ---",
			"3 probes, 2 answered, 33% lost, rtt min/avg/max = 0.500/1.000/1.500 ms",
		}
		if got := lines(r.stdout); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, strings.Join(want, "\n"))
		}
		if len(f.reqs) != 3 || f.reqs[0].Name != "w1" || f.reqs[0].Timeout != 250*time.Millisecond {
			t.Errorf("requests %+v", f.reqs)
		}
	})
	t.Run("ok/json", func(t *testing.T) {
		f := &fakePing{replies: []*apitype.PingReply{reply(true, 2*time.Millisecond)}}
		r := meshctl(t, "--socket", localclienttest.Serve(t, f), "ping", "w1", "-c", "1", "-o", "json")
		var m map[string]any
		if r.exit != exitOK || json.Unmarshal([]byte(r.stdout), &m) != nil {
			t.Fatalf("exit %d, stdout %q", r.exit, r.stdout)
		}
		if m["answered"] != 1.0 || m["rtt_avg_ms"] != 2.0 || m["overlay_ip"] != "10.42.0.3" {
			t.Errorf("json %v", m)
		}
	})
	t.Run("ok/path", func(t *testing.T) {
		direct := reply(true, time.Millisecond)
		direct.Path = &apitype.PingPath{Direct: "192.0.2.3:4242"}
		dropped := reply(false, 0) // a tunnel, but the probe lost (a firewall)
		dropped.Path = &apitype.PingPath{Direct: "192.0.2.3:4242"}
		relayed := reply(true, 3*time.Millisecond)
		relayed.Path = &apitype.PingPath{Relay: "c1", RelayIP: "10.42.0.1"}
		f := &fakePing{replies: []*apitype.PingReply{reply(false, 0), direct, dropped, relayed}}
		r := meshctl(t, "--socket", localclienttest.Serve(t, f), "ping", "w1", "-c", "4", "-i", "10ms")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
		}
		want := []string{
			"PING w1 (10.42.0.3): TCP probes to port 7946 over the overlay",
			"no answer from w1 (10.42.0.3): probe=1 timeout 1s",
			"answer from w1 (10.42.0.3): probe=2 time=1.000 ms (refused), direct 192.0.2.3:4242",
			"no answer from w1 (10.42.0.3): probe=3 timeout 1s, direct 192.0.2.3:4242",
			"answer from w1 (10.42.0.3): probe=4 time=3.000 ms (refused), relayed via c1",
			"--- w1 ping statistics ---",
			"4 probes, 2 answered, 50% lost, rtt min/avg/max = 1.000/2.000/3.000 ms",
		}
		if got := lines(r.stdout); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, strings.Join(want, "\n"))
		}

		f = &fakePing{replies: []*apitype.PingReply{direct, relayed, reply(false, 0)}}
		r = meshctl(t, "--socket", localclienttest.Serve(t, f), "ping", "w1", "-c", "3", "-i", "10ms", "-o", "json")
		var out struct {
			Probes []struct {
				Probe int               `json:"probe"`
				Path  *apitype.PingPath `json:"path"`
			} `json:"probes"`
			Path *apitype.PingPath `json:"path"`
		}
		if r.exit != exitOK || json.Unmarshal([]byte(r.stdout), &out) != nil || len(out.Probes) != 3 {
			t.Fatalf("exit %d, stdout %q", r.exit, r.stdout)
		}
		if p := out.Probes[0].Path; p == nil || *p != (apitype.PingPath{Direct: "192.0.2.3:4242"}) {
			t.Errorf("probe 1 path %+v, want direct 192.0.2.3:4242", p)
		}
		if p := out.Probes[1].Path; p == nil || *p != (apitype.PingPath{Relay: "c1", RelayIP: "10.42.0.1"}) {
			t.Errorf("probe 2 path %+v, want relayed via c1 (10.42.0.1)", p)
		}
		if p := out.Probes[2].Path; p != nil {
			t.Errorf("probe 3 path %+v, want none (no tunnel)", p)
		}
		if out.Path == nil || out.Path.Relay != "c1" { // the last path known
			t.Errorf("path %+v, want the last known one (relayed via c1)", out.Path)
		}
	})
	t.Run("fail/all-lost", func(t *testing.T) {
		f := &fakePing{replies: []*apitype.PingReply{reply(false, 0), reply(false, 0)}}
		r := meshctl(t, "--socket", localclienttest.Serve(t, f), "ping", "w1", "-c", "2", "-i", "10ms")
		checkFailure(t, r, exitFailure, codes.PingLost)
		if !regexp.MustCompile(`(?m)^2 probes, 0 answered, 100% lost$`).MatchString(r.stdout) {
			t.Errorf("summary missing:\n%s", r.stdout)
		}
	})
	t.Run("fail/all-lost-no-route", func(t *testing.T) {
		unreachable := reply(false, 0)
		unreachable.Lost = "no route to host"
		f := &fakePing{replies: []*apitype.PingReply{unreachable, reply(false, 0)}}
		r := meshctl(t, "--socket", localclienttest.Serve(t, f), "ping", "w1", "-c", "2", "-i", "10ms")
		checkFailure(t, r, exitFailure, codes.PingLost)
		if !strings.Contains(r.stdout, "probe=1 no route to host\n") || !strings.Contains(r.stdout, "probe=2 timeout 1s\n") ||
			!regexp.MustCompile(`(?m)^2 probes, 0 answered, 100% lost$`).MatchString(r.stdout) {
			t.Errorf("want each lost probe's reason and the summary:\n%s", r.stdout)
		}
	})
	t.Run("fail/unknown-node", func(t *testing.T) {
		r := meshctl(t, "--socket", localclienttest.Serve(t, &fakePing{}), "ping", "nobody")
		checkFailure(t, r, exitFailure, codes.NodeUnknown)
		if r.stdout != "" {
			t.Errorf("stdout %q, want nothing", r.stdout)
		}
	})
	t.Run("ok/port", func(t *testing.T) {
		f := &fakePing{replies: []*apitype.PingReply{reply(true, time.Millisecond)}}
		r := meshctl(t, "--socket", localclienttest.Serve(t, f), "ping", "w1", "-c", "1", "--port", "5432")
		if r.exit != 0 || len(f.reqs) != 1 || f.reqs[0].Port != 5432 || f.reqs[0].Name != "w1" {
			t.Errorf("exit %d, requests %+v; want one for w1 port 5432", r.exit, f.reqs)
		}
	})
	for _, args := range [][]string{{"ping"}, {"ping", "w1", "-c", "0"}, {"ping", "w1", "-W", "0s"}, {"ping", "w1", "-i", "1ms"}, {"ping", "w1", "-W", "31s"},
		{"ping", "w1", "-p", "70000"}, {"ping", "w1", "--port", "-1"}} {
		t.Run("usage/"+strings.Join(args, "_"), func(t *testing.T) {
			f := &fakePing{}
			r := meshctl(t, append([]string{"--socket", localclienttest.Serve(t, f)}, args...)...)
			if r.exit != exitUsage || len(f.reqs) != 0 {
				t.Errorf("exit %d after %d requests, want %d and none", r.exit, len(f.reqs), exitUsage)
			}
		})
	}
}
