package state

import (
	"bytes"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, GossipKeySize) }

// TestSetGossipKeysSteps: a rotation goes install, use, drop, each a
// compare-and-set on the keyring before it; anything else is refused
// with nothing changed.
func TestSetGossipKeysSteps(t *testing.T) {
	f := New()
	mustApply(t, f, bootstrapCmd())
	old := testCluster().GossipKeys[0]
	step := func(s KeyStep, keys ...[]byte) SetGossipKeys {
		c, _ := f.Cluster()
		return SetGossipKeys{Keys: keys, Step: s, Expect: KeyringID(c.GossipKeys), At: t0.Add(time.Minute), Actor: "uid:0"}
	}
	for _, tc := range []struct {
		name string
		cmd  SetGossipKeys
		want codes.Code
	}{
		{"fail/use before install", step(KeyUse, key(9), old), codes.BadRequest},
		{"fail/drop before install", step(KeyDrop, old), codes.BadRequest},
		{"fail/install without the primary", step(KeyInstall, key(8), key(9)), codes.BadRequest},
		{"fail/install the same key", step(KeyInstall, old, old), codes.BadRequest},
		{"fail/short key", step(KeyInstall, old, key(9)[:16]), codes.BadRequest},
		{"fail/stale expect", SetGossipKeys{Keys: [][]byte{old, key(9)}, Step: KeyInstall, Expect: "0000", At: t0}, codes.Busy},
		{"fail/unknown step", step("swap", old, key(9)), codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := f.Cluster()
			if err := apply(t, f, tc.cmd); codes.Of(err) != tc.want {
				t.Fatalf("err %v (code %q), want %s", err, codes.Of(err), tc.want)
			}
			if after, _ := f.Cluster(); KeyringID(after.GossipKeys) != KeyringID(before.GossipKeys) {
				t.Fatal("a refused step changed the keys")
			}
		})
	}
	mustApply(t, f, step(KeyInstall, old, key(9)))
	if c, _ := f.Cluster(); KeyringID(c.GossipKeys) != KeyringID([][]byte{old, key(9)}) || !c.GossipKeysRotated.IsZero() {
		t.Fatalf("after install: %d keys, rotated %v", len(c.GossipKeys), c.GossipKeysRotated)
	}
	mustApply(t, f, step(KeyUse, key(9), old))
	mustApply(t, f, step(KeyDrop, key(9)))
	c, _ := f.Cluster()
	if KeyringID(c.GossipKeys) != KeyringID([][]byte{key(9)}) || !c.GossipKeysRotated.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after drop: keyring %s, rotated %v", KeyringID(c.GossipKeys), c.GossipKeysRotated)
	}
	var steps []string
	for _, e := range f.Audit() {
		if e.Code == codes.EventKeysRotated {
			steps = append(steps, e.Subject)
			if bytes.Contains([]byte(e.Detail), key(9)) {
				t.Fatal("a key reached the audit ring")
			}
		}
	}
	if len(steps) != 3 || steps[0] != "install" || steps[2] != "drop" {
		t.Fatalf("audit steps %v, want install, use, drop", steps)
	}
}

func TestKeyIDs(t *testing.T) {
	if got := KeyID(key(1)); len(got) != 8 {
		t.Fatalf("KeyID %q, want 8 hex characters", got)
	}
	if KeyringID([][]byte{key(1), key(2)}) == KeyringID([][]byte{key(2), key(1)}) {
		t.Fatal("KeyringID ignores which key is primary")
	}
}
