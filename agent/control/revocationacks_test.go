package control

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestRemoveAndConfirm: after the removal is recorded, the members are
// asked for the revocation list version that holds it; an answer for that
// version signed by the member counts, one for an older version, one
// signed by another member's key, from the removed node itself or from a
// stranger does not; the silent member is pending, with a
// RevocationPending warning; the round is recorded in raft, so every
// control node's node list shows it.
func TestRemoveAndConfirm(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	for _, w := range []string{"w1", "w2", "w3"} {
		c.admit(t, origin, w, pki.RoleWorker, nil, enroll.Ports{})
	}
	var asked RevocationQuery
	var bound time.Duration
	origin.p.hooks.AskMembers = func(_ context.Context, name string, payload []byte, b time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error) {
		if name == KeyringQueryName { // the removal's key rotation: the tags report
			return nil, errNoGossip
		}
		if name != RevocationQueryName || json.Unmarshal(payload, &asked) != nil {
			t.Errorf("asked %s %q", name, payload)
		}
		bound = b
		ok := func(name string) []byte { return ack(t, c, name, name, asked.Version, asked.Nonce) }
		answers := map[string][]byte{"origin": ok("origin"), "c2": ack(t, c, "c2", "origin", asked.Version, asked.Nonce),
			"w1": ok("w1"), "w2": ack(t, c, "w2", "w2", asked.Version-1, asked.Nonce), "w3": ok("w3")[:3], "stranger": ok("w1")}
		if done(answers) {
			t.Error("done with c2, w2 and w3 not acknowledged")
		}
		return answers, nil
	}
	ctx := within(t, 20*time.Second)
	resp, err := origin.p.RemoveAndConfirm(ctx, "w3", "test", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if want := origin.p.RevocationVersion(); asked.Version != want || want == 0 || resp.Version != want {
		t.Fatalf("asked for version %d, response %d, raft holds %d", asked.Version, resp.Version, want)
	}
	if bound != 1500*time.Millisecond {
		t.Fatalf("bound %s", bound)
	}
	if !slices.Equal(resp.Acked, []string{"origin", "w1"}) || !slices.Equal(resp.Pending, []string{"c2", "w2"}) {
		t.Fatalf("acked %v pending %v; want [origin w1] and [c2 w2] (c2's answer signed by origin's key; w3 is the removed node)",
			resp.Acked, resp.Pending)
	}
	if len(resp.Warnings) != 1 || resp.Warnings[0].Code != codes.RevocationPending {
		t.Fatalf("warnings %+v", resp.Warnings)
	}
	for _, m := range []*member{origin, c2} {
		waitFor(t, 5*time.Second, m.name+" shows the round", func() bool {
			rows, err := m.p.Nodes(ctx)
			if err != nil {
				return false
			}
			i := slices.IndexFunc(rows, func(r0 apitype.Node) bool { return r0.Name == "w3" })
			return i >= 0 && rows[i].State == string(state.NodeRemoved) && rows[i].Revocation == "pending: c2, w2"
		})
	}

	// Everyone answers: done ends the wait, and nobody is pending.
	origin.p.hooks.AskMembers = func(_ context.Context, name string, payload []byte, _ time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error) {
		if name == KeyringQueryName {
			return nil, errNoGossip
		}
		var q RevocationQuery
		_ = json.Unmarshal(payload, &q)
		answers := map[string][]byte{}
		for _, n := range []string{"origin", "c2", "w1"} {
			answers[n] = ack(t, c, n, n, q.Version, q.Nonce)
			if done(answers) {
				return answers, nil
			}
		}
		t.Error("done never satisfied with every active member answering")
		return answers, nil
	}
	resp, err = origin.p.RemoveAndConfirm(ctx, "w2", "test", 0)
	if err != nil || len(resp.Pending) != 0 || len(resp.Warnings) != 0 || resp.Bound != DefaultRevocationAckTimeout {
		t.Fatalf("%+v, %v", resp, err)
	}
	waitFor(t, 5*time.Second, "c2 records w2's round as acknowledged", func() bool {
		a, ok := c2.p.Raft().FSM().RevocationAck("id-w2")
		return ok && RevocationSummary(a.Pending) == "acknowledged" && slices.Equal(a.Acked, []string{"c2", "origin", "w1"})
	})
}

// ack is name's acknowledgement of revocation list version v, signed
// with signer's TLS key (name's own, or another member's: forged).
func ack(t *testing.T, c *testCluster, name, signer string, v int, nonce []byte) []byte {
	a := RevocationQuery{Version: v, ID: "id-" + name}
	a.Sig = c.attest(t, signer, pki.AttestRevoked, nonce, RevokedStatement(a.ID, v))
	b, _ := json.Marshal(a)
	return b
}
