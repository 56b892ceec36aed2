//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/crash"
)

// crashBin builds, once, meshd with the crash points compiled in (build
// tag crashpoints; the release build has none: TestReleaseHasNoCrashPoints).
var crashBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "meshd-crash")
	cmd := exec.Command("go", "build", "-tags", "crashpoints", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../cmd/meshd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build meshd with crash points: %v\n%s", err, out)
	}
	return bin, nil
})

// waitExit waits for nd's meshd to exit by itself (a crash point), within d.
func (nd *Node) waitExit(t testing.TB, d time.Duration) {
	t.Helper()
	if nd.cmd == nil {
		return
	}
	select {
	case <-nd.exited:
		nd.cmd = nil
	case <-time.After(d):
		t.Fatalf("meshd %s still runs %s after its crash point", nd.NodeName, d)
	}
}

// TestCrashAtEveryJoinStep (issue 12 item 1): meshd is killed with SIGKILL
// at every crash point of a join in turn, on the joiner (between every two
// steps of agent/join.go) and on the control node that serves it, which is
// also the CA holder (each step of the enroll server's admission, and
// before and after its signer signs). After each crash the dead process is
// started again and the same `meshctl join TOKEN` is run again: it must
// complete, or answer AlreadyJoined because the restarted node already is
// the member the first run made. Either way the joiner ends an active,
// running member, and the cluster never holds an active record without a
// running node, a used token without a record, or a running node whose
// identity raft does not list as active.
func TestCrashAtEveryJoinStep(t *testing.T) {
	bin, err := crashBin()
	if err != nil {
		t.Fatal(err)
	}
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Bin = bin
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	var joiners []*Node

	run := func(t *testing.T, i int, point string, onServer bool) {
		var server *Node
		if onServer {
			server = origin
		}
		crashJoin(t, n, bin, origin, server, point, fmt.Sprintf("j%d", i), true, &joiners)
	}
	// The server's points first: the control node the joiner of
	// join/after-raft-join adds is a seed too, and could serve a later
	// join instead of the armed origin.
	points := slices.Clone(crash.Points)
	isJoiner := func(p string) int {
		if strings.HasPrefix(p, "join/") {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(points, func(a, b string) int { return cmp.Compare(isJoiner(a), isJoiner(b)) })
	for i, p := range points {
		onServer := !strings.HasPrefix(p, "join/")
		t.Run(strings.ReplaceAll(p, "/", "-"), func(t *testing.T) { run(t, i, p, onServer) })
	}
}

// crashJoin arms server (or, when nil, a new joiner called name) at point,
// runs a join of name admitted on admitter, waits for the armed meshd to
// die there, starts it again unarmed and runs the same join again, which
// must complete or answer AlreadyJoined; then name must be an active,
// running member and checkJoinInvariants must hold (joiners lists every
// other running node but admitter; name is added). mustFail: the first
// join cannot have completed (no other seed could take over).
func crashJoin(t *testing.T, n *Net, bin string, admitter, server *Node, point, name string, mustFail bool, joiners *[]*Node) {
	t.Helper()
	j := n.NewNode(name)
	j.Bin = bin
	victim := j
	if server != nil {
		victim = server
		server.Stop(t)
	}
	victim.Env = []string{"MESHD_CRASH_AT=" + point}
	if server != nil {
		server.Start(t)
		waitHasLeader(t, server)
	}
	j.Start(t)
	*joiners = append(*joiners, j)
	var extra []string
	if point == "join/after-raft-join" {
		extra = []string{"--role", "control"}
	}
	// The armed node serves the join; at a signer point the CA holder is
	// armed and the admitter (a follower) serves it, asking the holder to
	// sign over the internal API.
	var tok string
	switch {
	case server != nil && strings.HasPrefix(point, "signer/"):
		tok = admitter.AdmitFirstAt(t, admitter.IP, name, extra...)
	case server != nil:
		tok = admitter.AdmitFirstAt(t, server.IP, name, extra...)
	default:
		tok = admitter.Admit(t, name, extra...)
	}

	out, errs, code := j.Ctl(t.Context(), "join", tok)
	if code == 0 && mustFail {
		t.Fatalf("join completed though %s was armed at %s\n%s", victim.NodeName, point, out)
	}
	victim.waitExit(t, 10*time.Second)
	if b, _ := os.ReadFile(victim.LogPath); !strings.Contains(string(b), "crash point "+point) {
		t.Fatalf("%s died, but not at its crash point %s:\n%s", victim.NodeName, point, errs)
	}
	t.Logf("%s: %s killed; the join said: exit %d %s", point, victim.NodeName, code, firstLine(errs))
	victim.Env = nil
	victim.Start(t)
	if server != nil {
		waitHasLeader(t, server)
	}

	// NoLeader says "wait for an election": what an operator does, the
	// test does (the restarted node may have been the leader).
	Eventually(t, 20*time.Second, "the same join answered without NoLeader", func() error {
		out, errs, code = j.Ctl(t.Context(), "join", tok)
		if code == 1 && strings.HasPrefix(errs, string(codes.NoLeader)+": ") {
			return errors.New(firstLine(errs))
		}
		return nil
	})
	switch {
	case code == 0:
		t.Logf("%s: the same join run again completed", point)
	case code == 1 && strings.HasPrefix(errs, string(codes.AlreadyJoined)+": "):
		t.Logf("%s: the restarted node was already the member the first run made: %s", point, firstLine(errs))
	default:
		t.Fatalf("%s: the same join run again: exit %d, want 0 or AlreadyJoined\n%s%s", point, code, out, errs)
	}
	Eventually(t, 30*time.Second, name+" an active running member", func() error {
		st, err := statusOf(j)
		if err != nil {
			return err
		}
		if st.State != "running" {
			return fmt.Errorf("%s is %s", name, st.State)
		}
		r, ok := nodeRowErr(admitter, name)
		if !ok || r.State != "active" || r.ID != st.NodeID {
			return fmt.Errorf("%s runs as %s; raft records %+v", name, st.NodeID, r)
		}
		return nil
	})
	checkJoinInvariants(t, admitter, *joiners)
}

// TestCrashOnServingControlNodes: the server's crash points with three
// control nodes, where the node that serves the enroll call is a follower
// (c2, minted to be the token's first seed) and the CA holder
// (origin) signs for it over the internal API. The enroll points kill the
// serving follower: the joiner moves on to the next seed, which resumes
// or refuses, and the same join run again completes. The signer points
// kill the CA holder in the middle of a follower's signing request.
func TestCrashOnServingControlNodes(t *testing.T) {
	bin, err := crashBin()
	if err != nil {
		t.Fatal(err)
	}
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Bin = bin
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	nodes := []*Node{origin}
	ctl := map[string]*Node{"origin": origin}
	for _, name := range []string{"c2", "c3"} {
		c := n.NewNode(name)
		c.Bin = bin
		c.Start(t)
		c.MustCtl(t, "join", origin.Admit(t, name, "--role", "control"))
		nodes = append(nodes, c)
		ctl[name] = c
	}
	for i, p := range crash.Points {
		if strings.HasPrefix(p, "join/") {
			continue
		}
		server, admitter := ctl["c2"], ctl["c3"]
		if strings.HasPrefix(p, "signer/") {
			server, admitter = origin, ctl["c2"]
		}
		t.Run(strings.ReplaceAll(p, "/", "-"), func(t *testing.T) {
			crashJoin(t, n, bin, admitter, server, p, fmt.Sprintf("w%d", i), false, &nodes)
		})
	}
}

// checkJoinInvariants: no active record without a running node of that
// id, no used token without a record of its node, and no running node
// whose identity raft does not record as active.
func checkJoinInvariants(t *testing.T, origin *Node, joiners []*Node) {
	t.Helper()
	nodes := origin.Nodes(t)
	var toks []apitype.Token
	if err := origin.CtlJSON(t.Context(), &toks, "tokens"); err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		if tk.State == apitype.TokenUsed && !slices.ContainsFunc(nodes, func(x apitype.Node) bool { return x.Name == tk.ConsumedBy }) {
			t.Errorf("token %s is used by %q, which has no record: %+v", tk.ID, tk.ConsumedBy, nodes)
		}
	}
	running := map[string]string{origin.NodeName: ""}
	for _, j := range joiners {
		st, err := statusOf(j)
		if err != nil {
			t.Errorf("%s: %v", j.NodeName, err)
			continue
		}
		if st.State != "running" {
			continue
		}
		running[j.NodeName] = st.NodeID
		i := slices.IndexFunc(nodes, func(x apitype.Node) bool { return x.ID == st.NodeID })
		if i < 0 || nodes[i].State != "active" {
			t.Errorf("%s runs with identity %s, which raft does not record as active: %+v", j.NodeName, st.NodeID, nodes)
		}
	}
	for _, x := range nodes {
		if id, ok := running[x.Name]; x.State == "active" && (!ok || (id != "" && id != x.ID)) {
			t.Errorf("%s (%s) is active in raft but no node runs as it", x.Name, x.ID)
		}
	}
}

func statusOf(nd *Node) (apitype.Status, error) {
	var st apitype.Status
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := nd.CtlJSON(ctx, &st, "status")
	return st, err
}

func nodeRowErr(nd *Node, name string) (apitype.Node, bool) {
	var ns []apitype.Node
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if nd.CtlJSON(ctx, &ns, "nodes") != nil {
		return apitype.Node{}, false
	}
	i := slices.IndexFunc(ns, func(x apitype.Node) bool { return x.Name == name })
	if i < 0 {
		return apitype.Node{}, false
	}
	return ns[i], true
}

// waitLeader waits until nd's raft has a leader (a restarted single voter
// elects itself).
func waitHasLeader(t testing.TB, nd *Node) {
	t.Helper()
	Eventually(t, 20*time.Second, nd.NodeName+" has a raft leader", func() error {
		st, err := statusOf(nd)
		if err != nil {
			return err
		}
		if st.Leader == "" {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
