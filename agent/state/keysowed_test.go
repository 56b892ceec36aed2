package state

import (
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
)

// TestKeysOwed (issue 27): a node that leaves, fails its join or is
// removed owes a gossip key rotation, once; a rotation's install step
// takes on what is owed and its drop pays it; a node gone after the
// install (it may have fetched the installed key) waits for the next.
func TestKeysOwed(t *testing.T) {
	f := New()
	mustApply(t, f, bootstrapCmd())
	for i, name := range []string{"w1", "w2", "w3"} {
		seed := byte(20 + i)
		mustApply(t, f, MintToken{Record: tokenRecord(seed, name, pki.RoleWorker), Actor: "uid:0"})
	}
	mustApply(t, f, admitCmd(20, "n-w1", "w1", pki.RoleWorker, "10.42.0.21"))
	mustApply(t, f, admitCmd(21, "n-w2", "w2", pki.RoleWorker, "10.42.0.22"))
	mustApply(t, f, joinCmd(22, "n-w3", "w3", pki.RoleWorker))
	debt := func(owed, paying []string) {
		t.Helper()
		c, _ := f.Cluster()
		if !slices.Equal(c.KeysOwed, owed) || !slices.Equal(c.KeysPaying, paying) {
			t.Fatalf("owed %v paying %v, want %v and %v", c.KeysOwed, c.KeysPaying, owed, paying)
		}
	}
	debt(nil, nil)
	at := t0.Add(time.Minute)
	mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeLeft, At: at, Actor: "node:n-w1"})
	mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: at, Actor: "uid:0"}) // already gone: owed once
	debt([]string{"n-w1"}, nil)
	step := func(s KeyStep, keys ...[]byte) {
		c, _ := f.Cluster()
		mustApply(t, f, SetGossipKeys{Keys: keys, Step: s, Expect: KeyringID(c.GossipKeys), At: at, Actor: "uid:0"})
	}
	old := testCluster().GossipKeys[0]
	step(KeyInstall, old, key(9))
	debt(nil, []string{"n-w1"})
	mustApply(t, f, FailJoin{NodeID: "n-w3", Cause: "never confirmed", At: at, Actor: "node:n-origin"})
	step(KeyUse, key(9), old)
	step(KeyDrop, key(9))
	debt([]string{"n-w3"}, nil)
	mustApply(t, f, SetNodeState{NodeID: "n-w2", State: NodeRemoved, At: at, Actor: "uid:0"})
	if c, _ := f.Cluster(); !slices.Equal(c.KeysDebt(), []string{"n-w3", "n-w2"}) {
		t.Fatalf("debt %v", c.KeysDebt())
	}
	// A rotation that stalls after its install keeps paying for its
	// nodes in the next one.
	step(KeyInstall, key(9), key(10))
	step(KeyInstall, key(9), key(11))
	debt(nil, []string{"n-w3", "n-w2"})
	step(KeyUse, key(11), key(9))
	step(KeyDrop, key(11))
	debt(nil, nil)
}
