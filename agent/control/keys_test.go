package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
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
// source FSM holds, in its tags: hints that count for nothing but
// liveness (only signed answers report a step done).
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

// answer is how a member answers the keyring query: as itself (signed
// with its own TLS key), or with another name's id or signature.
type answer struct {
	id     string // the node id it answers with
	signer string // whose TLS key signs ("": no signature, as the previous release)
}

// as is name answering honestly.
func as(name string) answer { return answer{id: "id-" + name, signer: name} }

// answering is an AskMembers stand-in for the keyring query: every 10 ms
// until ctx ends, each member (by name) answers once the keyring src's
// FSM holds is the asked one, as a member that follows raft at once does.
// asked counts the keyring queries; seen, if not nil, gets each keyring
// asked.
func answering(t *testing.T, c *testCluster, src *member, asked *int, seen *[]string, members map[string]answer) func(context.Context, string, []byte,
	time.Duration, func(map[string][]byte) bool) (map[string][]byte, error) {
	return func(ctx context.Context, name string, payload []byte, _ time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error) {
		var q KeyringQuery
		if name != KeyringQueryName || json.Unmarshal(payload, &q) != nil || q.Keyring == "" || len(q.Nonce) != queryNonceSize {
			t.Errorf("asked %s %q", name, payload)
			return nil, errors.New("not a keyring query")
		}
		src.hooks.mu.Lock()
		*asked++
		if seen != nil {
			*seen = append(*seen, q.Keyring)
		}
		src.hooks.mu.Unlock()
		answers := map[string][]byte{}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if cl, _ := src.p.Raft().FSM().Cluster(); state.KeyringID(cl.GossipKeys) == q.Keyring {
				for n, a := range members {
					got := KeyringQuery{Keyring: q.Keyring, ID: a.id}
					if a.signer != "" {
						got.Sig = c.attest(t, a.signer, pki.AttestKeyring, q.Nonce, KeyringStatement(a.id, q.Keyring))
					}
					answers[n], _ = json.Marshal(got)
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

// TestRotateKeysSteps: a rotation writes install, use and drop through
// raft (audited), waits for the members' signed answers between steps,
// ends with a single fresh key that an active worker fetches over mTLS,
// while a removed node is refused the keyring.
func TestRotateKeysSteps(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	w1, w1keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, w1keys, enroll.Ports{}, w1)
	w2, w2keys, _ := c.identity(t, "w2", pki.RoleWorker)
	c.admitLeaf(t, origin, "w2", pki.RoleWorker, w2keys, enroll.Ports{}, w2)
	before := clusterKeys(origin)
	origin.hooks.mu.Lock()
	origin.hooks.reports = following(c2, "origin", "c2", "w1")
	origin.hooks.mu.Unlock()
	asked := 0
	var seen []string // keyrings asked, step by step
	// c2's FSM: the follower's view lags the leader's.
	origin.p.hooks.AskMembers = answering(t, c, c2, &asked, &seen, map[string]answer{"origin": as("origin"), "c2": as("c2"), "w1": as("w1")})

	// Removing w2 rotates the key; w2 cannot hold it up or fetch it.
	if err := origin.p.Remove(within(t, 30*time.Second), "w2", "uid:0"); err != nil {
		t.Fatalf("remove w2: %v", err)
	}
	after := clusterKeys(origin)
	if len(after) != 1 || bytes.Equal(after[0], before[0]) || len(after[0]) != state.GossipKeySize {
		t.Fatalf("after the rotation: %d keys (same as before: %v)", len(after), bytes.Equal(after[0], before[0]))
	}
	if len(seen) != 3 || seen[2] != state.KeyringID(after) {
		t.Fatalf("keyrings asked %v, want each of the three steps, the last the new key alone", seen)
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

// stalling is a cluster of origin, active w1 and removed "gone", with a
// 400 ms key step: a rotation that waits on anyone stalls at once.
func stalling(t *testing.T) (*testCluster, *member) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, keyStep: 400 * time.Millisecond}
	origin := c.bootstrap(t, nil)
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	c.admit(t, origin, "gone", pki.RoleWorker, nil, enroll.Ports{})
	if err := origin.p.Write(within(t, 5*time.Second), &state.SetNodeState{NodeID: "id-gone", State: state.NodeRemoved,
		At: time.Now(), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	return c, origin
}

// TestRotateKeysStalls: a live member that never reports a step stops the
// rotation at that step with codes.KeyRotationStalled naming it, within
// the step timeout; the cluster keeps both keys (everyone still shares
// one). A removed node reporting a stale keyring holds nothing up.
func TestRotateKeysStalls(t *testing.T) {
	c, origin := stalling(t)
	stale := state.KeyringID(clusterKeys(origin))
	origin.hooks.mu.Lock()
	origin.hooks.reports = func() []KeyReport {
		r := following(origin, "origin")()
		return append(r, KeyReport{Name: "gone", ID: "id-gone", Alive: true, Keyring: stale},
			KeyReport{Name: "w1", ID: "id-w1", Alive: true, Keyring: stale})
	}
	origin.hooks.mu.Unlock()
	asked := 0
	origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin")})
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
	origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin"), "w1": as("w1")})
	if _, err := origin.p.RotateKeys(within(t, 10*time.Second), "uid:0"); err != nil {
		t.Fatalf("rotation once w1 follows: %v", err)
	}
	if n := len(clusterKeys(origin)); n != 1 {
		t.Fatalf("after the rotation: %d keys, want 1", n)
	}
}

// TestRotateKeysForgedReports is issue 27's attack 2 by a taken member
// that advertises another node's overlay address (gossip then shows that
// node alive, with whatever tags the forger chose). Its tags say nothing:
// w1 "reporting" the new keyring in its tags but answering unsigned, or
// signed by another member's key, is still a laggard. And a member gossip
// shows alive holds nothing up once a direct probe of its record's
// overlay address finds it down: the forged w1 is not waited for.
func TestRotateKeysForgedReports(t *testing.T) {
	c, origin := stalling(t)
	origin.hooks.mu.Lock()
	origin.hooks.reports = following(origin, "origin", "w1") // the tags of every step, forged for w1
	origin.hooks.mu.Unlock()
	asked := 0
	for name, forged := range map[string]answer{
		"unsigned":               {id: "id-w1"},
		"signed by origin's key": {id: "id-w1", signer: "origin"},
	} {
		origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin"), "w1": forged})
		_, err := origin.p.RotateKeys(within(t, 10*time.Second), "uid:0")
		if codes.Of(err) != codes.KeyRotationStalled || !strings.Contains(err.Error(), "w1") {
			t.Fatalf("w1's answer %s: %v, want %s naming w1", name, err, codes.KeyRotationStalled)
		}
	}
	// Gossip shows w1 alive with a frozen keyring, but w1's overlay
	// address does not answer: the rotation goes through without it.
	var probed []netip.Addr
	origin.p.hooks.Reach = func(_ context.Context, a netip.Addr) error {
		origin.hooks.mu.Lock()
		probed = append(probed, a)
		origin.hooks.mu.Unlock()
		return errors.New("no answer through the overlay")
	}
	origin.hooks.mu.Lock()
	origin.hooks.reports = func() []KeyReport {
		return append(following(origin, "origin")(), KeyReport{Name: "w1", ID: "id-w1", Alive: true, Keyring: "frozen"})
	}
	origin.hooks.mu.Unlock()
	origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin")})
	r, err := origin.p.RotateKeys(within(t, 10*time.Second), "uid:0")
	if err != nil || r.Members != 1 {
		t.Fatalf("rotation with w1 alive in gossip alone: %+v %v, want it through with origin alone", r, err)
	}
	w1, _ := origin.p.Raft().FSM().NodeByName("w1")
	origin.hooks.mu.Lock()
	defer origin.hooks.mu.Unlock()
	if !slices.Contains(probed, w1.OverlayIP) {
		t.Fatalf("probed %v, want w1's overlay address %s", probed, w1.OverlayIP)
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
	origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin"), "w1": as("w1")})
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
	origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin"),
		"w1": {id: "id-gone", signer: "gone"}, "gone": as("gone")})
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

// TestDepartureOwesKeyRotation (issue 27 item 5): a node that leaves, or
// whose join fails, took the gossip keys with it; raft records the debt
// and the leader rotates in the background (PayKeys) once the grace has
// passed, until nothing is owed. Not before the grace: a removal's own
// rotation, started at once on whichever control node removed, pays
// without a second one competing.
func TestDepartureOwesKeyRotation(t *testing.T) {
	c, origin := newCluster(t)
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	w2 := c.enrollLeaf(t, origin, "w2", pki.RoleWorker, nil, enroll.Ports{}, nil) // joining: it has the keys
	asked := 0
	origin.p.hooks.AskMembers = answering(t, c, origin, &asked, nil, map[string]answer{"origin": as("origin")})
	for _, gone := range []state.Command{
		&state.SetNodeState{NodeID: "id-w1", State: state.NodeLeft, At: time.Now(), Actor: "node:w1"},
		&state.FailJoin{NodeID: w2, Cause: "the joiner did not confirm", At: time.Now(), Actor: "node:origin"},
	} {
		before := state.KeyringID(clusterKeys(origin))
		if err := origin.p.Write(within(t, 5*time.Second), gone); err != nil {
			t.Fatal(err)
		}
		if cl, _ := origin.p.Raft().FSM().Cluster(); len(cl.KeysDebt()) != 1 {
			t.Fatalf("%T: owed %v, want the departed node", gone, cl.KeysDebt())
		}
		if origin.p.PayKeys() {
			t.Fatalf("%T: rotation started within the grace", gone)
		}
		waitFor(t, 10*time.Second, "the owed rotation started", func() bool {
			origin.hooks.mu.Lock()
			started := asked > 0
			origin.hooks.mu.Unlock()
			return started || origin.p.PayKeys()
		})
		waitFor(t, 10*time.Second, "the owed rotation paid", func() bool {
			// The reconcile pass a Poke wakes calls PayKeys; here the
			// test does. Without it a late keyring query of the rotation
			// before (counted after asked was reset) passed "started"
			// with no rotation begun, and nothing ever began one.
			origin.p.PayKeys()
			cl, _ := origin.p.Raft().FSM().Cluster()
			return len(cl.KeysDebt()) == 0 && len(cl.GossipKeys) == 1 && state.KeyringID(cl.GossipKeys) != before
		})
		origin.hooks.mu.Lock()
		asked = 0
		origin.hooks.mu.Unlock()
	}
	var actors []string
	for _, e := range origin.p.Raft().FSM().Audit() {
		if e.Code == codes.EventKeysRotated && e.Subject == "drop" {
			actors = append(actors, e.Actor)
		}
	}
	if len(actors) != 2 {
		t.Fatalf("audited %d rotations (%v), want one per departure", len(actors), actors)
	}
}
