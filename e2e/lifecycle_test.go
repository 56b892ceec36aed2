//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/crash"
)

// Issue 11: a node's life in raft. These drive the real binaries through
// meshctl: leave and rejoin without ceremony (no remove, no restart),
// --force keeping a former node's id and overlay IP, a join that never
// confirms ending failed, and quorum-safe leave and remove.

// nodeRow is name's row in nd's `meshctl nodes`.
func nodeRow(t testing.TB, nd *Node, name string) (apitype.Node, bool) {
	t.Helper()
	for _, x := range nd.Nodes(t) {
		if x.Name == name {
			return x, true
		}
	}
	return apitype.Node{}, false
}

// admitJSON mints a token on nd and returns the whole answer.
func admitJSON(t testing.TB, nd *Node, name string, extra ...string) (token, reuses string) {
	t.Helper()
	var r struct{ Token, Reuses string }
	if err := nd.CtlJSON(t.Context(), &r, append([]string{"admit", name}, extra...)...); err != nil {
		t.Fatal(err)
	}
	return r.Token, r.Reuses
}

// userspace makes nd's meshd run Nebula in userspace mode.
func userspace(t testing.TB, nd *Node) {
	t.Helper()
	f, err := os.OpenFile(nd.Config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("overlay_mode: userspace\n"); err != nil {
		t.Fatal(err)
	}
}

// TestLifecycleRejoin: leave, admit the same name again, join, with no
// `remove` and no meshd restart (w1 runs Nebula in userspace mode, which
// used to hold its port until a restart); the node keeps its node id and
// overlay IP. Then a killed and removed worker rejoins with --force and
// keeps its id and IP too, and its old leaf is refused on port 7300.
// `meshctl nodes` marks the node that answers and says when a node that
// is not alive was last seen.
func TestLifecycleRejoin(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	w1, w2 := n.NewNode("w1"), n.NewNode("w2")
	userspace(t, w1)
	for _, w := range []*Node{w1, w2} {
		w.Start(t)
		w.MustCtl(t, "join", origin.Admit(t, w.NodeName))
	}
	before := map[string]apitype.Node{}
	for _, x := range origin.Nodes(t) {
		before[x.Name] = x
		if x.Self != (x.Name == "origin") {
			t.Fatalf("origin's node list marks self=%t on %s", x.Self, x.Name)
		}
	}

	// Leave, then admit the same name at once and join from the same meshd.
	w1.MustCtl(t, "leave")
	Eventually(t, 10*time.Second, "origin sees w1 left, with when it was last seen", func() error {
		r, _ := nodeRow(t, origin, "w1")
		if r.State != "left" || r.Gossip == "alive" || r.LastSeen.IsZero() {
			return fmt.Errorf("w1: state %s, gossip %s, last seen %v", r.State, r.Gossip, r.LastSeen)
		}
		return nil
	})
	if out := origin.MustCtl(t, "nodes"); !strings.Contains(out, "origin *") || !strings.Contains(out, "last seen") {
		t.Fatalf("meshctl nodes does not mark this node or show last seen:\n%s", out)
	}
	tok, reuses := admitJSON(t, origin, "w1")
	if !strings.Contains(reuses, "left") || !strings.Contains(reuses, before["w1"].ID) {
		t.Fatalf("admit of a left node says %q, want that it reuses the left record", reuses)
	}
	w1.MustCtl(t, "join", tok)
	after, _ := nodeRow(t, origin, "w1")
	if after.State != "active" || after.ID != before["w1"].ID || after.OverlayIP != before["w1"].OverlayIP {
		t.Fatalf("w1 after leave and rejoin: %+v, want active with id %s and overlay %s", after, before["w1"].ID, before["w1"].OverlayIP)
	}
	if tokenState(t, origin, "w1") != "used" {
		t.Fatalf("w1's second token is %s", tokenState(t, origin, "w1"))
	}

	// Kill w2, remove it, restart it with its old files, admit the name
	// again and join with --force.
	oldID := nodeIdentity(t, w2)
	api := net.JoinHostPort(origin.IP, "7300")
	w2.Kill()
	origin.MustCtl(t, "remove", "w2")
	w2.Start(t)
	tok, reuses = admitJSON(t, origin, "w2")
	if !strings.Contains(reuses, "removed") {
		t.Fatalf("admit of a removed node says %q", reuses)
	}
	w2.MustCtl(t, "join", "--force", tok)
	after, _ = nodeRow(t, origin, "w2")
	if after.State != "active" || after.ID != before["w2"].ID || after.OverlayIP != before["w2"].OverlayIP {
		t.Fatalf("w2 after remove and join --force: %+v, want active with id %s and overlay %s", after, before["w2"].ID, before["w2"].OverlayIP)
	}
	if st, code, err := apiAnswer(w2.Host, oldID, api); err != nil || st != http.StatusForbidden || code != codes.NotMember {
		t.Fatalf("w2's old leaf on 7300: %d %s %v, want 403 %s", st, code, err, codes.NotMember)
	}
	if st, code, err := apiAnswer(w2.Host, nodeIdentity(t, w2), api); err != nil || st != http.StatusOK {
		t.Fatalf("w2's new leaf on 7300: %d %s %v", st, code, err)
	}
	Eventually(t, 10*time.Second, "origin reaches the rejoined w2 over the overlay", func() error {
		return origin.Ping(t.Context(), after.OverlayIP)
	})
}

// TestLifecycleFailedJoin: a join whose machine cannot run the overlay
// (its Nebula port is taken) is refused before its token is sent (issue
// 52 item 10: on main it was admitted first, then failed, leaving a used
// token and a joining record). A join that is admitted and certified but
// never confirms (its meshd dies right after the certificates arrive) is
// recorded failed with its cause by the leader, not active; its token
// stays used. Admitting the name again reuses the failed record and a
// join --force then keeps its id and overlay IP.
func TestLifecycleFailedJoin(t *testing.T) {
	bin, err := crashBin()
	if err != nil {
		t.Fatal(err)
	}
	n := NewNet(t)
	nodes := cluster(t, n)
	origin := nodes[0]
	w1 := n.NewNode("w1")
	w1.Start(t)
	var hold net.PacketConn
	if err := inNetns(w1.Name, func() (err error) {
		hold, err = net.ListenPacket("udp4", net.JoinHostPort(w1.IP, "4242"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tok1 := origin.Admit(t, "w1")
	_, errs, code := w1.Ctl(t.Context(), "join", tok1)
	hold.Close()
	if code != 1 || !strings.Contains(errs, "4242") {
		t.Fatalf("join with the Nebula port taken: exit %d, want 1 naming the port\n%s", code, errs)
	}
	if s := tokenState(t, origin, "w1"); s != "unused" {
		t.Fatalf("the join refused on its machine left its token %s, want unused", s)
	}
	if r, ok := nodeRow(t, origin, "w1"); ok {
		t.Fatalf("the join refused on its machine left a record: %+v", r)
	}

	// The same token, unused, on a joiner that dies once its
	// certificates arrived: the leader's join bound records it failed.
	w1.Stop(t)
	w1.Bin, w1.Env = bin, []string{"MESHD_CRASH_AT=" + crash.JoinAfterEnroll}
	w1.Start(t)
	if _, _, code := w1.Ctl(t.Context(), "join", tok1); code == 0 {
		t.Fatal("join completed though its meshd was armed to die after the enrollment")
	}
	var r apitype.Node
	took := Eventually(t, 40*time.Second, "w1's join recorded failed", func() error {
		r, _ = nodeRow(t, origin, "w1")
		if r.State != "failed" || r.Cause == "" {
			return fmt.Errorf("w1 is %s (%q)", r.State, r.Cause)
		}
		return nil
	})
	t.Logf("w1 failed %s after its meshd died: %s", took.Round(time.Millisecond), r.Cause)
	var toks []apitype.Token
	if err := origin.CtlJSON(t.Context(), &toks, "tokens"); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(toks, func(tk apitype.Token) bool { return tk.Name == "w1" && tk.State == "used" }); i < 0 || toks[i].ConsumedBy != "w1" {
		t.Fatalf("tokens does not show w1's token used, consumed by w1: %+v", toks)
	}

	w1.Kill()
	w1.Env = nil
	w1.Start(t)
	tok, reuses := admitJSON(t, origin, "w1")
	if !strings.Contains(reuses, "failed") {
		t.Fatalf("admit of a failed node says %q", reuses)
	}
	w1.MustCtl(t, "join", "--force", tok)
	again, _ := nodeRow(t, origin, "w1")
	if again.State != "active" || again.ID != r.ID || again.OverlayIP != r.OverlayIP {
		t.Fatalf("w1 after rejoin: %+v, want active with id %s and overlay %s", again, r.ID, r.OverlayIP)
	}
}

// TestLifecycleQuorum: join --force on the CA holder is refused with its
// token unused. With one of three voters down, a voter's leave and a live
// voter's removal are refused with QuorumLoss naming the voter that is
// down; removing the dead voter is allowed. Then join --force on a
// running voter leaves raft first: the configuration keeps no dead voter.
func TestLifecycleQuorum(t *testing.T) {
	n := NewNet(t)
	nodes := controlCluster(t, n)
	origin, c2, c3 := nodes[0], nodes[1], nodes[2]
	// The CA holder's join --force is refused before its token is spent,
	// and its init --force too (issue 13 item 1): ca/ stays as it was.
	caBefore := dirBytes(t, filepath.Join(origin.Dir, "ca"))
	failsWith(t, origin, codes.CAHolderStays, "join", "--force", origin.Admit(t, "x9"))
	if s := tokenState(t, origin, "x9"); s != "unused" {
		t.Fatalf("the refused join --force left its token %s", s)
	}
	failsWith(t, origin, codes.CAHolderStays, "init", "--force", "--cluster", "other")
	if caAfter := dirBytes(t, filepath.Join(origin.Dir, "ca")); caAfter != caBefore || caBefore == "" {
		t.Fatalf("the CA holder's ca/ changed after the refused init/join --force (or is empty)")
	}
	c3.Kill()
	for _, try := range []struct {
		nd   *Node
		args []string
	}{{c2, []string{"leave"}}, {origin, []string{"remove", "c2"}}} {
		_, errs, code := try.nd.Ctl(t.Context(), try.args...)
		if code != 1 || !strings.HasPrefix(errs, string(codes.QuorumLoss)+": ") || !strings.Contains(errs, "c3") {
			t.Fatalf("%s: meshctl %v with c3 down: exit %d, want 1 with %s naming c3\n%s", try.nd.NodeName, try.args, code, codes.QuorumLoss, errs)
		}
	}
	if r, _ := nodeRow(t, origin, "c2"); r.State != "active" || (r.Raft != "voter" && r.Raft != "leader") {
		t.Fatalf("c2 after the refused leave and removal: %+v", r)
	}
	origin.MustCtl(t, "remove", "c3")

	// A new control node, then join --force on a running voter (c2) with a
	// token for another name: c2 leaves raft first.
	c4 := n.NewNode("c4")
	c4.Start(t)
	c4.MustCtl(t, "join", origin.Admit(t, "c4", "--role", "control"))
	out := c2.MustCtl(t, "join", "--force", origin.Admit(t, "c5", "--role", "control"))
	if !strings.Contains(out, "left cluster") {
		t.Fatalf("join --force on a voter does not say it left first:\n%s", out)
	}
	Eventually(t, 10*time.Second, "no dead voter in raft", func() error {
		var voters []string
		for _, x := range origin.Nodes(t) {
			if x.Raft != "voter" && x.Raft != "leader" {
				continue
			}
			voters = append(voters, x.Name)
			if x.State != "active" || x.Gossip != "alive" {
				return fmt.Errorf("voter %s is %s, gossip %s", x.Name, x.State, x.Gossip)
			}
		}
		slices.Sort(voters)
		if !slices.Equal(voters, []string{"c4", "c5", "origin"}) {
			return fmt.Errorf("voters %v, want c4, c5, origin", voters)
		}
		return nil
	})
	if r, _ := nodeRow(t, origin, "c2"); r.State != "left" || r.Raft != "none" {
		b, _ := json.Marshal(r)
		t.Fatalf("c2 after join --force as c5: %s, want left and out of raft", b)
	}
}

// dirBytes is every file under dir, by name and content, in walk order.
func dirBytes(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		c, err := os.ReadFile(p)
		b.WriteString(p + "\n" + string(c))
		return err
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return b.String()
}
