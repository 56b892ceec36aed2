package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// result is one meshctl invocation.
type result struct {
	exit           int
	stdout, stderr string
}

func meshctl(t *testing.T, args ...string) result {
	t.Helper()
	return meshctlIn(t, "", args...)
}

// meshctlIn is meshctl with stdin as its standard input.
func meshctlIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	exit := run(t.Context(), args, strings.NewReader(stdin), &stdout, &stderr)
	return result{exit: exit, stdout: stdout.String(), stderr: stderr.String()}
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// checkFailure checks the failure contract: exit code, `CODE: cause` first
// on stderr, and a non-empty `remedy: ` second line.
func checkFailure(t *testing.T, r result, exit int, want codes.Code) {
	t.Helper()
	if r.exit != exit {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.exit, exit, r.stdout, r.stderr)
	}
	l := lines(r.stderr)
	if len(l) < 2 {
		t.Fatalf("stderr has %d lines, want a code line and a remedy line:\n%s", len(l), r.stderr)
	}
	code, cause, ok := strings.Cut(l[0], ": ")
	if !ok || codes.Code(code) != want || cause == "" {
		t.Fatalf("stderr first line %q, want %q followed by its cause", l[0], string(want)+": ")
	}
	if remedy, ok := strings.CutPrefix(l[1], "remedy: "); !ok || remedy == "" {
		t.Fatalf("stderr second line %q, want a non-empty %q line", l[1], "remedy: ")
	}
}

// shortDir is a temp dir short enough for a unix socket path.

// nowhere is a socket path that nothing listens on.
func nowhere(t *testing.T) string { return filepath.Join(localclienttest.ShortDir(t), "nothing") }

// fakeMeshd answers the local API with func-field handlers, behind the same
// Host guard as meshd; a nil field is a 404.
type fakeMeshd struct {
	nodes  func(w http.ResponseWriter, r *http.Request)
	status func(w http.ResponseWriter, r *http.Request)
	tokens func(w http.ResponseWriter, r *http.Request)
	admit  func(w http.ResponseWriter, r *http.Request)
	join   func(w http.ResponseWriter, r *http.Request)
	plan   func(w http.ResponseWriter, r *http.Request)
}

func (f *fakeMeshd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Host != apitype.Host {
		writeJSON(w, http.StatusForbidden, apitype.NewError(codes.PermissionDenied, nil))
		return
	}
	var h func(http.ResponseWriter, *http.Request)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == apitype.PathNodes:
		h = f.nodes
	case r.Method == http.MethodGet && r.URL.Path == apitype.PathStatus:
		h = f.status
	case r.Method == http.MethodGet && r.URL.Path == apitype.PathTokens:
		h = f.tokens
	case r.Method == http.MethodPost && r.URL.Path == apitype.PathAdmit:
		h = f.admit
	case r.Method == http.MethodPost && r.URL.Path == apitype.PathJoin:
		h = f.join
	case r.Method == http.MethodPost && r.URL.Path == apitype.PathJoinPlan:
		h = f.plan
	}
	if h == nil {
		http.NotFound(w, r)
		return
	}
	h(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestExplain(t *testing.T) {
	tests := []struct {
		name string
		arg  string
		want codes.Code
	}{
		{"ok/known", string(codes.TokenConsumed), codes.TokenConsumed},
		{"ok/lower-case", strings.ToLower(string(codes.DaemonUnreachable)), codes.DaemonUnreachable},
		{"ok/warning-code", string(codes.ClockSkew), codes.ClockSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, "--socket", nowhere(t), "explain", tt.arg)
			if r.exit != exitOK || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, string(tt.want)) ||
				!strings.Contains(r.stdout, tt.want.Cause()) || !strings.Contains(r.stdout, tt.want.Remedy()) {
				t.Fatalf("stdout does not give %s with its cause and remedy:\n%s", tt.want, r.stdout)
			}
		})
	}
	for _, tt := range []struct{ name, arg string }{
		{"fail/unknown-code", "X999999NOPENO"},
		{"fail/not-a-code", "hello"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, "explain", tt.arg)
			checkFailure(t, r, exitFailure, codes.UnknownCode)
			if r.stdout != "" {
				t.Fatalf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"usage/explain-missing-code", []string{"explain"}},
		{"usage/explain-two-codes", []string{"explain", string(codes.Internal), string(codes.Busy)}},
		{"usage/admit-missing-name", []string{"admit"}},
		{"usage/join-missing-token", []string{"join"}},
		{"usage/init-missing-cluster", []string{"init"}},
		{"usage/nodes-extra-arg", []string{"nodes", "w1"}},
		{"usage/unknown-flag", []string{"nodes", "--bogus"}},
		{"usage/unknown-root-flag", []string{"--bogus", "nodes"}},
		{"usage/bad-ttl", []string{"admit", "w1", "--ttl", "forever"}},
		{"usage/bad-output-nodes", []string{"nodes", "-o", "yaml"}},
		{"usage/bad-output-status", []string{"status", "--output", "xml"}},
		{"usage/bad-output-admit", []string{"admit", "w1", "-o", "yaml"}},
		{"usage/unknown-command", []string{"frobnicate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The socket goes nowhere, so reaching for the daemon would exit 3.
			r := meshctl(t, append([]string{"--socket", nowhere(t)}, tt.args...)...)
			if r.exit != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.exit, exitUsage, r.stdout, r.stderr)
			}
			if r.stdout != "" || r.stderr == "" {
				t.Fatalf("stdout %q, stderr %q: want the complaint on stderr only", r.stdout, r.stderr)
			}
		})
	}
}

func TestDaemonUnreachable(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"fail/status", []string{"status"}},
		{"fail/status-json", []string{"status", "-o", "json"}},
		{"fail/nodes", []string{"nodes"}},
		{"fail/tokens", []string{"tokens"}},
		{"fail/admit", []string{"admit", "w1"}},
		{"fail/join", []string{"join", "sometoken"}},
		{"fail/init", []string{"init", "--cluster", "prod"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, append([]string{"--socket", nowhere(t)}, tt.args...)...)
			checkFailure(t, r, exitUnreachable, codes.DaemonUnreachable)
			if r.stdout != "" {
				t.Fatalf("stdout %q, want nothing", r.stdout)
			}
		})
	}
	t.Run("fail/socket-from-env", func(t *testing.T) {
		t.Setenv("MESHD_SOCKET", nowhere(t))
		checkFailure(t, meshctl(t, "status"), exitUnreachable, codes.DaemonUnreachable)
	})
}

func TestReport(t *testing.T) {
	tests := []struct {
		name string
		err  error
		exit int
		want codes.Code
	}{
		{"fail/plain-error", errors.New("boom"), exitFailure, codes.Internal},
		{"fail/coded", codes.Wrap(codes.TokenExpired, errors.New("expired 2m ago")), exitFailure, codes.TokenExpired},
		{"fail/coded-no-detail", codes.Wrap(codes.NoLeader, nil), exitFailure, codes.NoLeader},
		{"fail/api-error-wrapped", fmt.Errorf("admit: %w", apitype.NewError(codes.NotControl, errors.New("worker"))), exitFailure, codes.NotControl},
		{"fail/unreachable", codes.Wrap(codes.DaemonUnreachable, errors.New("dial")), exitUnreachable, codes.DaemonUnreachable},
		{"fail/api-unreachable", apitype.NewError(codes.DaemonUnreachable, nil), exitUnreachable, codes.DaemonUnreachable},
		// A newer meshd may send a code this meshctl's table lacks; the
		// cause and remedy on the wire must still reach the user.
		{"fail/code-unknown-to-this-meshctl", &apitype.Error{ErrCode: "X409999NEWCOD",
			Cause: "a cause only the newer meshd knows", Remedy: "a remedy only the newer meshd knows"}, exitFailure, "X409999NEWCOD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			exit := report(&stderr, tt.err)
			checkFailure(t, result{exit: exit, stderr: stderr.String()}, tt.exit, tt.want)
		})
	}
	t.Run("usage/usage-error", func(t *testing.T) {
		var stderr bytes.Buffer
		if exit := report(&stderr, usageError{errors.New("bad flag")}); exit != exitUsage {
			t.Fatalf("exit %d, want %d", exit, exitUsage)
		}
	})
}

func TestNodes(t *testing.T) {
	node := apitype.Node{Name: "w1", ID: "n-2", Role: "worker", State: "active", Gossip: "alive",
		OverlayIP: "10.42.0.2", OverlayIP6: "fd5a:1b2c:3d4e::2", Underlay: "192.0.2.7", Raft: "none",
		CertExpires: time.Date(2031, 2, 3, 12, 0, 0, 0, time.UTC), Version: "1.0.0"}
	raw := func(body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}
	}
	withNodes := func(ns ...apitype.Node) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, ns) }
	}
	natNode, relayNode := node, node
	natNode.Underlay, natNode.SeenFrom, natNode.BehindNAT = "192.168.1.10", "203.0.113.1", true
	natNode.Tunnel = &apitype.PingPath{Relay: "r1", RelayIP: "10.42.0.3"}
	relayNode.Name, relayNode.OverlayIP, relayNode.OverlayIP6, relayNode.Underlay, relayNode.SeenFrom, relayNode.Relay = "r1", "10.42.0.3", "", "192.0.2.8", "192.0.2.8", true
	relayNode.Tunnel = &apitype.PingPath{Direct: "192.0.2.8:4242"}
	header := []string{"NAME", "ROLE", "STATE", "GOSSIP", "OVERLAY", "OVERLAY6", "UNDERLAY", "NAT", "RAFT", "CERT", "EXPIRES", "VERSION", "TUNNEL"}

	jsonTests := []struct {
		name    string
		handler func(http.ResponseWriter, *http.Request)
		want    []apitype.Node
	}{
		{"ok/json-null", raw("null\n"), []apitype.Node{}},
		{"ok/json-empty", raw("[]\n"), []apitype.Node{}},
		{"ok/json-one", withNodes(node), []apitype.Node{node}},
		{"ok/json-nat-relay", withNodes(natNode, relayNode), []apitype.Node{natNode, relayNode}},
	}
	for _, tt := range jsonTests {
		t.Run(tt.name, func(t *testing.T) {
			sock := localclienttest.Serve(t, &fakeMeshd{nodes: tt.handler})
			r := meshctl(t, "--socket", sock, "nodes", "-o", "json")
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
			}
			var arr []map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil || arr == nil {
				t.Fatalf("stdout is not a JSON array (%v):\n%s", err, r.stdout)
			}
			if len(arr) != len(tt.want) {
				t.Fatalf("%d nodes, want %d:\n%s", len(arr), len(tt.want), r.stdout)
			}
			for i, n := range tt.want {
				for k, v := range map[string]string{"name": n.Name, "role": n.Role, "state": n.State,
					"gossip": n.Gossip, "overlay_ip": n.OverlayIP, "overlay_ip6": n.OverlayIP6, "underlay_addr": n.Underlay, "raft": n.Raft,
					"cert_expires": n.CertExpires.Format(time.RFC3339), "version": n.Version} {
					if got, set := arr[i][k]; got != v && (v != "" || set) { // an empty field is left out
						t.Errorf("node %d: %s = %v, want %q", i, k, arr[i][k], v)
					}
				}
				// Issue 29's fields: where the cluster sees it from, behind
				// a NAT, a relay, this node's tunnel to it.
				var typed []apitype.Node
				if err := json.Unmarshal([]byte(r.stdout), &typed); err != nil {
					t.Fatal(err)
				}
				g := typed[i]
				if g.SeenFrom != n.SeenFrom || g.BehindNAT != n.BehindNAT || g.Relay != n.Relay ||
					(g.Tunnel == nil) != (n.Tunnel == nil) || (g.Tunnel != nil && *g.Tunnel != *n.Tunnel) {
					t.Errorf("node %d: seen_from %q behind_nat %v relay %v tunnel %+v; want %q %v %v %+v",
						i, g.SeenFrom, g.BehindNAT, g.Relay, g.Tunnel, n.SeenFrom, n.BehindNAT, n.Relay, n.Tunnel)
				}
			}
		})
	}

	tableTests := []struct {
		name     string
		handler  func(http.ResponseWriter, *http.Request)
		wantRows [][]string
	}{
		{"ok/table-none", raw("null\n"), nil},
		{"ok/table-one", withNodes(node), [][]string{{"w1", "worker", "active", "alive", "10.42.0.2", "fd5a:1b2c:3d4e::2", "192.0.2.7", "-", "none",
			node.CertExpires.Local().Format("2006-01-02"), "1.0.0", "-"}}},
		// Issue 29: a node behind a NAT shows the address the cluster
		// sees it from; a volunteer relay is worker+relay; this node's
		// tunnel to each is direct or relayed via a relay.
		{"ok/table-nat-relay", withNodes(natNode, relayNode), [][]string{
			{"w1", "worker", "active", "alive", "10.42.0.2", "fd5a:1b2c:3d4e::2", "192.168.1.10", "203.0.113.1", "none",
				node.CertExpires.Local().Format("2006-01-02"), "1.0.0", "relayed-via-r1"},
			{"r1", "worker+relay", "active", "alive", "10.42.0.3", "-", "192.0.2.8", "-", "none",
				node.CertExpires.Local().Format("2006-01-02"), "1.0.0", "direct"},
			{"NAT:", "behind", "a", "NAT,", "seen", "by", "the", "cluster", "from", "this", "address", "(UNDERLAY", "is", "the", "one", "it", "advertised)"},
			{"+relay:", "offers", "itself", "as", "a", "Nebula", "relay", "(relay:", "true);", "control", "nodes", "relay", "anyway"}}},
	}
	// Issue 35: a stock Nebula member: no underlay ("-"), no gossip
	// ("none"), its certificate's expiry, marked once past; a meshd node's
	// past expiry is not marked (its meshd renews it).
	phone := apitype.Node{Name: "phone", Role: "nebula", State: "active", Gossip: "none", OverlayIP: "10.42.0.9",
		Raft: "none", CertExpires: time.Date(2001, 2, 3, 12, 0, 0, 0, time.UTC), Version: "nebula"}
	tablet := phone
	tablet.Name, tablet.OverlayIP, tablet.CertExpires = "tablet", "10.42.0.10", time.Date(2099, 2, 3, 12, 0, 0, 0, time.UTC)
	oldWorker := node
	oldWorker.CertExpires = phone.CertExpires
	tableTests = append(tableTests, struct {
		name     string
		handler  func(http.ResponseWriter, *http.Request)
		wantRows [][]string
	}{"ok/table-stock-nebula", withNodes(phone, tablet, oldWorker), [][]string{
		{"phone", "nebula", "active", "none", "10.42.0.9", "-", "-", "-", "none", phone.CertExpires.Local().Format("2006-01-02"), "(expired)", "nebula", "-"},
		{"tablet", "nebula", "active", "none", "10.42.0.10", "-", "-", "-", "none", tablet.CertExpires.Local().Format("2006-01-02"), "nebula", "-"},
		{"w1", "worker", "active", "alive", "10.42.0.2", "fd5a:1b2c:3d4e::2", "192.0.2.7", "-", "none", phone.CertExpires.Local().Format("2006-01-02"), "1.0.0", "-"}}})
	// Issue 30: -o wide adds the DNS NAME column ("-" for a node without
	// one); json carries dns_name. Issue 31: and the EPHEMERAL column
	// before it ("yes" or "-"); json carries ephemeral.
	t.Run("ok/wide-dns-name", func(t *testing.T) {
		named := node
		named.DNSName, named.Ephemeral = "w1.alpha.mesh", true
		gone := relayNode
		gone.State, gone.DNSName = "removed", ""
		sock := localclienttest.Serve(t, &fakeMeshd{nodes: withNodes(named, gone)})
		r := meshctl(t, "--socket", sock, "nodes", "-o", "wide")
		l := lines(r.stdout)
		last2 := func(line string) []string { f := strings.Fields(line); return f[len(f)-2:] }
		if r.exit != exitOK || len(l) < 3 || !slices.Equal(strings.Fields(l[0]), append(slices.Clone(header), "EPHEMERAL", "DNS", "NAME")) ||
			!slices.Equal(last2(l[1]), []string{"yes", "w1.alpha.mesh"}) || !slices.Equal(last2(l[2]), []string{"-", "-"}) {
			t.Fatalf("nodes -o wide: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
		}
		r = meshctl(t, "--socket", sock, "nodes", "-o", "json")
		var typed []apitype.Node
		if err := json.Unmarshal([]byte(r.stdout), &typed); err != nil || len(typed) != 2 || typed[0].DNSName != "w1.alpha.mesh" ||
			!typed[0].Ephemeral || typed[1].Ephemeral || !strings.Contains(r.stdout, `"ephemeral": true`) {
			t.Fatalf("nodes -o json: %v\n%s", err, r.stdout)
		}
		if r := meshctl(t, "--socket", sock, "nodes", "-o", "yaml"); r.exit != exitUsage || !strings.Contains(r.stderr, "table, wide or json") {
			t.Fatalf("nodes -o yaml: exit %d\n%s", r.exit, r.stderr)
		}
	})
	for _, tt := range tableTests {
		t.Run(tt.name, func(t *testing.T) {
			sock := localclienttest.Serve(t, &fakeMeshd{nodes: tt.handler})
			r := meshctl(t, "--socket", sock, "nodes")
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
			}
			l := lines(r.stdout)
			if len(l) != 1+len(tt.wantRows) {
				t.Fatalf("%d lines, want a header and %d rows:\n%s", len(l), len(tt.wantRows), r.stdout)
			}
			if got := strings.Fields(l[0]); !slices.Equal(got, header) {
				t.Errorf("header %q, want %q", got, header)
			}
			for i, want := range tt.wantRows {
				if got := strings.Fields(l[i+1]); !slices.Equal(got, want) {
					t.Errorf("row %d = %q, want %q", i, got, want)
				}
			}
		})
	}

	// Pair health: a node some member cannot reach over the overlay is
	// marked "!" and named under the table with who cannot reach it; the
	// JSON carries unreachable_from.
	t.Run("ok/unreachable-from", func(t *testing.T) {
		c1 := apitype.Node{Name: "c1", Role: "control", State: "active", Gossip: "alive", Raft: "leader", UnreachableFrom: []string{"c2"}}
		c2 := apitype.Node{Name: "c2", Role: "control", State: "active", Gossip: "alive", Raft: "voter", UnreachableFrom: []string{"c1", "w1"}, Self: true}
		sock := localclienttest.Serve(t, &fakeMeshd{nodes: withNodes(c1, c2, node)})
		r := meshctl(t, "--socket", sock, "nodes")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
		}
		l := lines(r.stdout)
		want := []string{"* this node", "! c1: unreachable over the overlay from c2 (their own probes)",
			"! c2: unreachable over the overlay from c1, w1 (their own probes)"}
		if len(l) != 7 || !slices.Equal(l[4:], want) || strings.Fields(l[1])[1] != "!" || strings.Fields(l[2])[1] != "*" ||
			strings.Fields(l[2])[2] != "!" || strings.Contains(l[3], "!") {
			t.Fatalf("table:\n%s\nwant c1 and c2 marked, w1 not, then the footnotes %q", r.stdout, want)
		}
		r = meshctl(t, "--socket", sock, "nodes", "-o", "json")
		var arr []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil || len(arr) != 3 {
			t.Fatalf("json (%v):\n%s", err, r.stdout)
		}
		if got := fmt.Sprint(arr[1]["unreachable_from"]); got != "[c1 w1]" {
			t.Errorf("c2's unreachable_from %s, want [c1 w1]", got)
		}
		if _, ok := arr[2]["unreachable_from"]; ok {
			t.Errorf("w1 has unreachable_from in JSON: %v", arr[2])
		}
	})

	t.Run("fail/daemon-error", func(t *testing.T) {
		sock := localclienttest.Serve(t, &fakeMeshd{nodes: func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, codes.NotInCluster.Status(), apitype.NewError(codes.NotInCluster, nil))
		}})
		for _, o := range []string{"table", "json"} {
			r := meshctl(t, "--socket", sock, "nodes", "-o", o)
			checkFailure(t, r, exitFailure, codes.NotInCluster)
			if r.stdout != "" {
				t.Fatalf("-o %s: stdout %q, want nothing", o, r.stdout)
			}
		}
	})
}

func TestAdmit(t *testing.T) {
	const token = "mshj1-0123456789abcdef-prod-checksum"
	resp := apitype.AdmitResponse{Token: token, ID: "0123456789ab", Name: "w1", Role: "worker",
		Expires: time.Date(2031, 1, 1, 0, 15, 0, 0, time.UTC), Command: "meshctl join " + token}
	tests := []struct {
		name    string
		args    []string
		wantReq apitype.AdmitRequest
		json    bool
	}{
		{"ok/table", []string{"admit", "w1"}, apitype.AdmitRequest{Name: "w1", Role: "worker", TTL: 15 * time.Minute}, false},
		{"ok/flags", []string{"admit", "c2", "--role", "control", "--ttl", "30m", "--addr", "192.0.2.9"},
			apitype.AdmitRequest{Name: "c2", Role: "control", TTL: 30 * time.Minute, Addr: "192.0.2.9"}, false},
		{"ok/json", []string{"admit", "w1", "-o", "json"}, apitype.AdmitRequest{Name: "w1", Role: "worker", TTL: 15 * time.Minute}, true},
		{"ok/groups", []string{"admit", "w1", "--group", "db", "--group", "eu-west"},
			apitype.AdmitRequest{Name: "w1", Role: "worker", TTL: 15 * time.Minute, Groups: []string{"db", "eu-west"}}, false},
		// A reusable key: no NAME; the key's default lifetime (TTL 0) unless --ttl.
		{"ok/reusable", []string{"admit", "--reusable", "--uses", "50", "--name-prefix", "web-", "--ephemeral"},
			apitype.AdmitRequest{Role: "worker", Reusable: true, Uses: 50, NamePrefix: "web-", Ephemeral: true}, false},
		{"ok/reusable-ttl-host", []string{"admit", "--reusable", "--uses", "5", "--ttl", "72h", "--name-from-host"},
			apitype.AdmitRequest{Role: "worker", TTL: 72 * time.Hour, Reusable: true, Uses: 5, NamePrefix: "node-", NameFromHost: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := make(chan apitype.AdmitRequest, 1)
			sock := localclienttest.Serve(t, &fakeMeshd{admit: func(w http.ResponseWriter, r *http.Request) {
				var req apitype.AdmitRequest
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
					writeJSON(w, http.StatusBadRequest, apitype.NewError(codes.BadRequest, err))
					return
				}
				reqs <- req
				writeJSON(w, http.StatusOK, resp)
			}})
			r := meshctl(t, append([]string{"--socket", sock}, tt.args...)...)
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
			}
			select {
			case got := <-reqs:
				if !reflect.DeepEqual(got, tt.wantReq) {
					t.Errorf("meshd got %+v, want %+v", got, tt.wantReq)
				}
			default:
				t.Error("meshd saw no admit request")
			}
			if tt.json {
				var m map[string]any
				if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
					t.Fatalf("stdout is not a JSON object (%v):\n%s", err, r.stdout)
				}
				if m["token"] != token {
					t.Fatalf("token = %v, want %q", m["token"], token)
				}
				return
			}
			l := lines(r.stdout)
			if len(l) == 0 || l[len(l)-1] != token {
				t.Fatalf("last stdout line is not the token alone:\n%s", r.stdout)
			}
		})
	}
	// Flags that do not fit the kind asked for are refused before meshd is
	// asked.
	for _, tc := range []struct {
		name string
		args []string
		exit int
		code codes.Code
	}{
		{"uses-without-reusable", []string{"admit", "w1", "--uses", "3"}, exitFailure, codes.BadRequest},
		{"reusable-without-uses", []string{"admit", "--reusable"}, exitFailure, codes.KeyBadLimits},
	} {
		t.Run("fail/"+tc.name, func(t *testing.T) {
			sock := localclienttest.Serve(t, &fakeMeshd{admit: func(w http.ResponseWriter, _ *http.Request) {
				t.Error("meshd was asked")
			}})
			checkFailure(t, meshctl(t, append([]string{"--socket", sock}, tc.args...)...), tc.exit, tc.code)
		})
	}
	t.Run("fail/reusable-with-name", func(t *testing.T) {
		r := meshctl(t, "--socket", "/nonexistent", "admit", "w1", "--reusable", "--uses", "3")
		if r.exit != exitUsage {
			t.Fatalf("exit %d, want %d (usage)\n%s", r.exit, exitUsage, r.stderr)
		}
	})
	t.Run("fail/coded", func(t *testing.T) {
		sock := localclienttest.Serve(t, &fakeMeshd{admit: func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, codes.NotControl.Status(), apitype.NewError(codes.NotControl, errors.New("this node is a worker")))
		}})
		r := meshctl(t, "--socket", sock, "admit", "w1")
		checkFailure(t, r, exitFailure, codes.NotControl)
		if r.stdout != "" {
			t.Fatalf("stdout %q, want nothing", r.stdout)
		}
	})
}
