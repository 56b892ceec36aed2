package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// following reports every named member alive with the keyring its
// source FSM holds: members that follow raft (or fetch over mTLS) at once.
func following(src *member, nodes ...string) func() []KeyReport {
	return func() []KeyReport {
		cl, _ := src.p.Raft().FSM().Cluster()
		var out []KeyReport
		for _, n := range nodes {
			out = append(out, KeyReport{Name: n, ID: "id-" + n, Alive: true, Keyring: state.KeyringID(cl.GossipKeys)})
		}
		return out
	}
}

func clusterKeys(m *member) [][]byte {
	cl, _ := m.p.Raft().FSM().Cluster()
	return cl.GossipKeys
}

// TestRotateKeysSteps: a rotation writes install, use and drop through
// raft (audited), waits for the members' reports between steps, ends
// with a single fresh key that an active worker fetches over mTLS, while
// a removed node is refused the keyring.
func TestRotateKeysSteps(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	w1, w1keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, w1keys, enroll.Ports{}, w1)
	w2, w2keys, _ := c.identity(t, "w2", pki.RoleWorker)
	c.admitLeaf(t, origin, "w2", pki.RoleWorker, w2keys, enroll.Ports{}, w2)
	before := clusterKeys(origin)
	var seen []string // keyrings the members reported, step by step
	origin.hooks.mu.Lock()
	origin.hooks.reports = func() []KeyReport {
		r := following(c2, "origin", "c2", "w1")() // c2's FSM: the follower's view lags the leader's
		if len(seen) == 0 || seen[len(seen)-1] != r[0].Keyring {
			seen = append(seen, r[0].Keyring)
		}
		return r
	}
	origin.hooks.mu.Unlock()

	// Removing w2 rotates the key; w2 cannot hold it up or fetch it.
	if err := origin.p.Remove(within(t, 30*time.Second), "w2", "uid:0"); err != nil {
		t.Fatalf("remove w2: %v", err)
	}
	after := clusterKeys(origin)
	if len(after) != 1 || bytes.Equal(after[0], before[0]) || len(after[0]) != state.GossipKeySize {
		t.Fatalf("after the rotation: %d keys (same as before: %v)", len(after), bytes.Equal(after[0], before[0]))
	}
	if len(seen) < 4 {
		t.Fatalf("members reported %d keyrings, want the old one and each of the three steps", len(seen))
	}
	var steps []string
	for _, e := range origin.p.Raft().FSM().Audit() {
		if e.Code == codes.EventKeysRotated {
			steps = append(steps, e.Subject)
		}
	}
	if len(steps) != 3 || steps[0] != "install" || steps[1] != "use" || steps[2] != "drop" {
		t.Fatalf("audited steps %v", steps)
	}
	origin.hooks.mu.Lock()
	notes := origin.hooks.keyNotes
	origin.hooks.mu.Unlock()
	if notes == 0 {
		t.Fatal("the cluster was never told the keys changed")
	}

	cl, err := NewClient(w1)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.CloseIdle()
	var got GossipKeys
	if err := cl.Call(within(t, 5*time.Second), c2.addr, PathGossipKeys, false, nil, &got); err != nil {
		t.Fatalf("w1 fetches the keys from a follower: %v", err)
	}
	if len(got.Keys) != 1 || !bytes.Equal(got.Keys[0], after[0]) || got.Rotated.IsZero() {
		t.Fatalf("w1 got %d keys (rotated %v), want the new key alone", len(got.Keys), got.Rotated)
	}
	rc, err := NewClient(w2)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdle()
	if err := rc.Call(within(t, 5*time.Second), origin.addr, PathGossipKeys, false, nil, &got); codes.Of(err) != codes.NotMember {
		t.Fatalf("removed w2 fetches the keys: %v, want %s", err, codes.NotMember)
	}
}

// TestRotateKeysStalls: a live member that never reports a step stops the
// rotation at that step with codes.KeyRotationStalled naming it, within
// the step timeout; the cluster keeps both keys (everyone still shares
// one). A removed node reporting a stale keyring holds nothing up.
func TestRotateKeysStalls(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, keyStep: 400 * time.Millisecond}
	origin := c.bootstrap(t, nil)
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	c.admit(t, origin, "gone", pki.RoleWorker, nil, enroll.Ports{})
	if err := origin.p.Write(within(t, 5*time.Second), &state.SetNodeState{NodeID: "id-gone", State: state.NodeRemoved,
		At: time.Now(), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	stale := state.KeyringID(clusterKeys(origin))
	origin.hooks.mu.Lock()
	origin.hooks.reports = func() []KeyReport {
		r := following(origin, "origin")()
		return append(r, KeyReport{Name: "gone", ID: "id-gone", Alive: true, Keyring: stale},
			KeyReport{Name: "w1", ID: "id-w1", Alive: true, Keyring: stale})
	}
	origin.hooks.mu.Unlock()
	start := time.Now()
	_, err := origin.p.RotateKeys(within(t, 10*time.Second), "uid:0")
	took := time.Since(start)
	if codes.Of(err) != codes.KeyRotationStalled {
		t.Fatalf("rotation with a silent member: %v, want %s", err, codes.KeyRotationStalled)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("w1")) || bytes.Contains([]byte(err.Error()), []byte("gone")) {
		t.Fatalf("error %q: want w1 named as the laggard, the removed node not", err)
	}
	if took > 3*time.Second {
		t.Fatalf("stalled after %s, want about the step timeout (400ms)", took)
	}
	if n := len(clusterKeys(origin)); n != 2 {
		t.Fatalf("after the stalled install: %d keys, want 2 (old primary and new)", n)
	}
	if len(origin.logs.withCode(codes.KeyRotationStalled)) == 0 {
		t.Fatal("the stall was not logged with its code")
	}
	// The laggard catches up: a second rotation completes.
	origin.hooks.mu.Lock()
	origin.hooks.reports = following(origin, "origin", "w1")
	origin.hooks.mu.Unlock()
	if _, err := origin.p.RotateKeys(within(t, 10*time.Second), "uid:0"); err != nil {
		t.Fatalf("rotation once w1 follows: %v", err)
	}
	if n := len(clusterKeys(origin)); n != 1 {
		t.Fatalf("after the rotation: %d keys, want 1", n)
	}
}

// answering is an AskMembers stand-in for the keyring query: every 10 ms
// until ctx ends, each named member (name: node ID it answers with)
// answers once the keyring src's FSM holds is the asked one, as a member
// that follows raft at once does. asked counts the keyring queries.
func answering(t *testing.T, src *member, asked *int, members map[string]string) func(context.Context, string, []byte,
	time.Duration, func(map[string][]byte) bool) (map[string][]byte, error) {
	return func(ctx context.Context, name string, payload []byte, _ time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error) {
		var q KeyringQuery
		if name != KeyringQueryName || json.Unmarshal(payload, &q) != nil || q.Keyring == "" {
			t.Errorf("asked %s %q", name, payload)
			return nil, errors.New("not a keyring query")
		}
		src.hooks.mu.Lock()
		*asked++
		src.hooks.mu.Unlock()
		answers := map[string][]byte{}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if cl, _ := src.p.Raft().FSM().Cluster(); state.KeyringID(cl.GossipKeys) == q.Keyring {
				for n, id := range members {
					answers[n], _ = json.Marshal(KeyringQuery{Keyring: q.Keyring, ID: id})
				}
				if done(answers) {
					return answers, nil
				}
			}
			select {
			case <-ctx.Done():
				return answers, nil
			case <-tick.C:
			}
		}
	}
}

// TestRotateKeysByQuery: members whose gossip tags never show a step
// (serf's tag broadcast stuck, as the soak saw) still let a rotation
// through at once by answering its keyring query; an answer counts only
// with the name and node ID of an active record, so a removed node's
// answer, or one under another member's name with the wrong ID, holds
// the rotation up instead.
func TestRotateKeysByQuery(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, keyStep: 2 * time.Second}
	origin := c.bootstrap(t, nil)
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	c.admit(t, origin, "gone", pki.RoleWorker, nil, enroll.Ports{})
	if err := origin.p.Write(within(t, 5*time.Second), &state.SetNodeState{NodeID: "id-gone", State: state.NodeRemoved,
		At: time.Now(), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	stale := state.KeyringID(clusterKeys(origin))
	origin.hooks.mu.Lock()
	origin.hooks.reports = func() []KeyReport { // tags stuck at the old keyring
		var out []KeyReport
		for _, n := range []string{"origin", "w1", "gone"} {
			out = append(out, KeyReport{Name: n, ID: "id-" + n, Alive: true, Keyring: stale})
		}
		return out
	}
	origin.hooks.mu.Unlock()
	asked := 0
	origin.p.hooks.AskMembers = answering(t, origin, &asked, map[string]string{"origin": "id-origin", "w1": "id-w1"})
	start := time.Now()
	r, err := origin.p.RotateKeys(within(t, 10*time.Second), "uid:0")
	if err != nil {
		t.Fatalf("rotation with the members answering the query: %v", err)
	}
	if took := time.Since(start); took > time.Second || r.Members != 2 {
		t.Fatalf("rotation took %s with %d members, want well under the 2 s step timeout with origin and w1", took, r.Members)
	}
	if asked != 3 {
		t.Fatalf("asked %d keyring queries, want one a step", asked)
	}
	if n := len(clusterKeys(origin)); n != 1 {
		t.Fatalf("after the rotation: %d keys, want 1", n)
	}

	// w1's name with the removed node's ID, and the removed node itself,
	// count for nothing: w1 holds the rotation up.
	origin.p.hooks.AskMembers = answering(t, origin, &asked, map[string]string{"origin": "id-origin", "w1": "id-gone",
		"gone": "id-gone"})
	_, err = origin.p.RotateKeys(within(t, 10*time.Second), "uid:0")
	if codes.Of(err) != codes.KeyRotationStalled || !strings.Contains(err.Error(), "w1") ||
		strings.Contains(err.Error(), "gone") {
		t.Fatalf("rotation with w1 answered under the wrong ID: %v, want %s naming w1 alone", err, codes.KeyRotationStalled)
	}
}

// TestWorkerChecksControlLeaf: with a node list set, a worker's client
// accepts a control node only if its leaf is the current or previous leaf
// (or a leaf for the recorded key) of an active control record in the
// list; before a list, the CA and role check alone applies.
func TestWorkerChecksControlLeaf(t *testing.T) {
	c, origin := newCluster(t)
	leaf, err := origin.id.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	fp := pki.FingerprintOf(leaf).String()
	_, cl := c.worker(t, origin, "w9")
	rec := func(state, cur, prev string, pub []byte) []NodeRecord {
		r := NodeRecord{TLSFingerprint: cur, PrevTLSFingerprint: prev, TLSPublicKey: pub}
		r.ID, r.Name, r.Role, r.State = origin.nodeID, "origin", string(pki.RoleControl), state
		return []NodeRecord{r}
	}
	for _, tc := range []struct {
		name  string
		list  []NodeRecord // nil: no list yet
		allow bool
	}{
		{"ok/no list yet: CA and role only", nil, true},
		{"ok/current leaf", rec("active", fp, "", nil), true},
		{"ok/previous leaf while renewing", rec("active", "other", fp, nil), true},
		{"ok/renewed leaf for the recorded key", rec("active", "other", "older", leaf.RawSubjectPublicKeyInfo), true},
		{"fail/removed control node", rec("removed", fp, "", nil), false},
		{"fail/leaf not the recorded one", rec("active", "other", "older", []byte("another key")), false},
		{"fail/not in the list", []NodeRecord{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.list == nil {
				cl.CheckServers(nil)
			} else {
				cl.CheckServers(ActiveControlLeaves(tc.list))
			}
			var out []NodeRecord
			err := cl.Call(within(t, 5*time.Second), origin.addr, PathNodes, false, nil, &out)
			if tc.allow && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.allow && (err == nil || !errors.Is(err, ErrUnreachable)) {
				t.Fatalf("err %v, want the handshake refused", err)
			}
		})
	}
}
