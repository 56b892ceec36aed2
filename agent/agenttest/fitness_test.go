package agenttest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// controlTrio is origin, c2 and c3, control nodes of cluster alpha, each
// on its own clock; origin's agent takes tweak.
func controlTrio(t *testing.T, tweak ...func(*config.File)) []*agenttest.Node {
	t.Helper()
	origin := agenttest.NewNodeAt(t, "origin", agenttest.TakeIP(t), &agenttest.Clock{}, tweak...)
	c2 := agenttest.NewNode(t, "c2", &agenttest.Clock{})
	c3 := agenttest.NewNode(t, "c3", &agenttest.Clock{})
	origin.Init(t, "alpha")
	for _, c := range []*agenttest.Node{c2, c3} {
		if _, err := c.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: c.Name, Role: "control"})); err != nil {
			t.Fatalf("%s joins: %v", c.Name, err)
		}
	}
	return []*agenttest.Node{origin, c2, c3}
}

// leaderOf is the raft leader's name as n sees it.
func leaderOf(t *testing.T, n *agenttest.Node) string {
	t.Helper()
	st, err := n.Client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st.Leader
}

// warned is nil once n's status carries a warning with code whose detail
// holds every one of has.
func warned(t *testing.T, n *agenttest.Node, code codes.Code, has ...string) error {
	st, err := n.Client.Status(t.Context())
	if err != nil {
		return err
	}
	for _, w := range st.Warnings {
		if w.Code == code && !slices.ContainsFunc(has, func(s string) bool { return !strings.Contains(w.Detail, s) }) {
			return nil
		}
	}
	return fmt.Errorf("%s's status warns %+v; want %s naming %q", n.Name, st.Warnings, code, has)
}

// tokenFirstAt mints tokens on via until one lists sick's seed first:
// the join that uses it meets the sick control node first.
func tokenFirstAt(t *testing.T, via, sick *agenttest.Node, name string) string {
	t.Helper()
	for range 40 {
		tok := via.Admit(t, apitype.AdmitRequest{Name: name})
		parsed, err := enroll.ParseToken(tok)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(parsed.Seeds[0], sick.IP+":") {
			return tok
		}
		if _, err := via.Client.RevokeToken(t.Context(), tokenIDOf(parsed)); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("40 tokens minted on %s, none listing %s first", via.Name, sick.Name)
	return ""
}

// tokenIDOf is the id `meshctl tokens` shows for tok.
func tokenIDOf(tok enroll.Token) string { return tok.Secret.Hash().String()[:12] }

// TestClockSkewedControlNodeStepsAside: a control node whose clock jumps
// 2 h ahead (its time source shifted, not the machine's) finds it is the
// one off (the median of three clocks), warns in status (and the others
// warn about it), hands raft leadership off, refuses to mint
// (ClockUntrusted), lists a valid token as unused (expiry by the median
// clock), and a join whose token lists it first moves on and succeeds
// (issue 28 item 1: nothing warned, it kept leading and failed healthy
// joins, and listed valid tokens expired).
func TestClockSkewedControlNodeStepsAside(t *testing.T) {
	nodes := controlTrio(t)
	w1 := agenttest.NewNode(t, "w1", &agenttest.Clock{})
	lead := nodes[slices.IndexFunc(nodes, func(n *agenttest.Node) bool { return n.Name == leaderOf(t, nodes[0]) })]
	var other *agenttest.Node
	for _, n := range nodes {
		if n != lead {
			other = n
		}
	}
	lead.Clock.Advance(2 * time.Hour)
	t.Logf("%s leads; its clock now runs 2 h ahead", lead.Name)

	ctx := t.Context()
	agenttest.WaitFor(t, ctx, 20*time.Second, func() error {
		if err := warned(t, lead, codes.ClockUntrusted, "ahead of"); err != nil {
			return err
		}
		if err := warned(t, other, codes.ClockPeerSkewed, lead.Name); err != nil {
			return err
		}
		if l := leaderOf(t, other); l == lead.Name || l == "" {
			return fmt.Errorf("%s still leads (as %s sees it: %q)", lead.Name, other.Name, l)
		}
		return nil
	})
	if _, err := lead.Client.Admit(ctx, apitype.AdmitRequest{Name: "w9"}); codes.Of(err) != codes.ClockUntrusted {
		t.Fatalf("admit on the skewed node: %v, want %s", err, codes.ClockUntrusted)
	}

	tok := tokenFirstAt(t, other, lead, "w1")
	tokens, err := lead.Client.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := enroll.ParseToken(tok)
	if i := slices.IndexFunc(tokens, func(r apitype.Token) bool { return r.ID == tokenIDOf(parsed) }); i < 0 || tokens[i].State != apitype.TokenUnused {
		t.Fatalf("the skewed node lists the fresh token as %+v; want unused", tokens)
	}
	res, err := w1.Join(t, tok)
	if err != nil {
		t.Fatalf("join with the skewed node first in the token: %v", err)
	}
	t.Logf("w1 joined: %+v", res)
	// Joined, confirmed, and not failed afterwards by any leader.
	agenttest.WaitFor(t, ctx, 10*time.Second, func() error {
		if r := nodeRow(t, other, "w1"); r.State != "active" {
			return fmt.Errorf("w1 is %s", r.State)
		}
		return nil
	})
}

// TestFullDiskControlNodeStepsAside: a control node (the leader, not the
// CA holder) whose state dir is full warns in status (DiskFull, from its own write check), gives up raft leadership, and a join whose token lists
// it first moves on to another seed and succeeds (issue 28 item 2: a join
// answered by the full former leader failed NoLeader while another led,
// and status showed nothing).
func TestFullDiskControlNodeStepsAside(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "state")
	mountTmpfs(t, dir, 16<<20)
	nodes := controlTrio(t, func(c *config.File) { c.StateDir = dir })
	origin, c2 := nodes[0], nodes[1]
	w1 := agenttest.NewNode(t, "w1", &agenttest.Clock{})
	ctx := t.Context()
	// The CA moves to c2 first: a CA holder whose disk is full cannot
	// sign (it signs only what its raft has applied, and it applies
	// nothing while it cannot write its log), so no join could succeed.
	if _, err := origin.Client.CAHandoff(ctx, "c2"); err != nil {
		t.Fatalf("ca handoff to c2: %v", err)
	}
	if l := leaderOf(t, origin); l != "origin" {
		t.Fatalf("the leader is %s, not origin: the hand-off would not be exercised", l)
	}

	fill(t, filepath.Join(dir, "filler"), 0)
	agenttest.WaitFor(t, ctx, 20*time.Second, func() error {
		if err := warned(t, origin, codes.DiskFull, dir); err != nil {
			return err
		}
		if l := leaderOf(t, c2); l == "origin" || l == "" {
			return fmt.Errorf("origin still leads (as c2 sees it: %q)", l)
		}
		return nil
	})
	tok := tokenFirstAt(t, c2, origin, "w1")
	jctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var steps []string
	_, err := w1.Client.Join(jctx, apitype.JoinRequest{Token: tok}, func(l apitype.JoinLine) { steps = append(steps, fmt.Sprintf("%s %+v", l.Step, l.Warning)) })
	if err != nil {
		t.Fatalf("join with the full node first in the token: %v\n%s", err, strings.Join(steps, "\n"))
	}
	if !slices.ContainsFunc(steps, func(s string) bool { return strings.Contains(s, "cannot serve the join now") }) {
		t.Errorf("the join never met the full node first:\n%s", strings.Join(steps, "\n"))
	}
}
