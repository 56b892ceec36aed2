package gossip

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestSetKeysLocal: SetKeys installs, switches the primary and removes,
// only on this node's own keyring; bad keys are refused with the code and
// change nothing.
func TestSetKeysLocal(t *testing.T) {
	old, fresh := newKey(t), newKey(t)
	n := start(t, testConfig(t, "a", old))
	check := func(step string, want ...[]byte) {
		t.Helper()
		got := n.g.Keys()
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys, want %d", step, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: key %d differs (primary first)", step, i)
			}
		}
	}
	if err := n.g.SetKeys([][]byte{old, fresh}); err != nil {
		t.Fatal(err)
	}
	check("install", old, fresh)
	if err := n.g.SetKeys([][]byte{fresh, old}); err != nil {
		t.Fatal(err)
	}
	check("use", fresh, old)
	if err := n.g.SetKeys([][]byte{fresh}); err != nil {
		t.Fatal(err)
	}
	check("drop", fresh)
	for name, bad := range map[string][][]byte{"none": nil, "short": {fresh[:5]}} {
		if err := n.g.SetKeys(bad); codes.Of(err) != codes.GossipKey {
			t.Errorf("%s: %v, want %s", name, err, codes.GossipKey)
		}
		if bytes.Contains([]byte(errString(n.g.SetKeys(bad))), fresh[:5]) {
			t.Errorf("%s: the error carries key bytes", name)
		}
	}
	check("after refusals", fresh)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRotationLocksOutOldKey: a cluster rotates its key the way meshd
// does (every member installs, then uses, then drops, each on its own
// keyring); afterwards a member holding only the old key cannot join
// (codes.GossipKey), and the rotated members still see each other alive.
func TestRotationLocksOutOldKey(t *testing.T) {
	old, fresh := newKey(t), newKey(t)
	nodes, _ := cluster(t, old, "a", "b", "c")
	for _, step := range [][][]byte{{old, fresh}, {fresh, old}, {fresh}} {
		for _, n := range nodes {
			if err := n.g.SetKeys(step); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Gossip still flows on the new key: a tag update reaches the others.
	marks := []int{nodes[1].mark(), nodes[2].mark()}
	if err := nodes[0].g.SetTags(map[string]string{"id": "id-a", "role": "worker", "kr": "after"}); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes[1:] {
		n.await(t, marks[i], EventUpdate, "a")
	}
	intruder := start(t, testConfig(t, "removed", old))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if n, err := intruder.g.Join(ctx, []string{nodes[0].addr()}); codes.Of(err) != codes.GossipKey || n != 0 {
		t.Fatalf("join with the old key: %d joined, %v; want 0 and %s", n, err, codes.GossipKey)
	}
	for _, n := range nodes {
		for _, m := range n.g.Members() {
			if m.Name == "removed" {
				t.Fatalf("%s lists the old-key member (%s)", n.cfg.Name, m.Status)
			}
			if m.Status != StatusAlive {
				t.Fatalf("%s sees %s %s after the rotation, want alive", n.cfg.Name, m.Name, m.Status)
			}
		}
	}
}
