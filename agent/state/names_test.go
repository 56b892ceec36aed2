package state

import (
	"bytes"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestOneNameRule (issue 52 item 4): a live token or key prefix holds a
// name for every admission path. On main a key's joiner calling itself
// db1 took the name minted for db1 (and c2's, a control node's), a JWT's
// name claim likewise, and `admit web-3` was minted while key web- was
// live; the real db1 was then refused NameTaken.
func TestOneNameRule(t *testing.T) {
	mint := func(t *testing.T, f *FSM, seed byte, name string, role pki.Role) error {
		return apply(t, f, MintToken{Record: tokenRecord(seed, name, role), Actor: "uid:0", Names: true})
	}
	withKey := func(t *testing.T, fromHost bool) *FSM {
		f := bootstrapped(t)
		for seed, name := range map[byte]string{1: "db1", 2: "c2"} {
			role := pki.RoleWorker
			if name == "c2" {
				role = pki.RoleControl
			}
			if err := mint(t, f, seed, name, role); err != nil {
				t.Fatal(err)
			}
		}
		k := keyRecord(40, 5, "web-")
		k.Key.NameFromHost = fromHost
		mustApply(t, f, MintToken{Record: k, Actor: "uid:0", Names: true})
		return f
	}
	named := func(c Admit) Admit { c.Names = true; return c }

	t.Run("key-joiner-host-name-held-by-a-token", func(t *testing.T) {
		f := withKey(t, true)
		for i, host := range []string{"db1", "c2"} {
			c := named(keyJoinCmd(40, host+"-impostor", host))
			mustApply(t, f, c)
			if got, want := admittedName(t, f, c), []string{"web-1", "web-2"}[i]; got != want {
				t.Fatalf("a key's joiner calling itself %s was named %q, want %q", host, got, want)
			}
		}
		// The machines the names were minted for still join under them.
		mustApply(t, f, named(joinCmd(1, "n-db1", "db1", pki.RoleWorker)))
		mustApply(t, f, named(joinCmd(2, "n-c2", "c2", pki.RoleControl)))
	})
	t.Run("key-joiner-skips-a-name-a-token-holds", func(t *testing.T) {
		f := bootstrapped(t)
		if err := mint(t, f, 3, "web-1", pki.RoleWorker); err != nil { // before the key: its mint is fine
			t.Fatal(err)
		}
		mustApply(t, f, MintToken{Record: keyRecord(40, 5, "web-"), Actor: "uid:0", Names: true})
		c := named(keyJoinCmd(40, "m", ""))
		mustApply(t, f, c)
		if got := admittedName(t, f, c); got != "web-2" {
			t.Fatalf("the key's joiner was named %q, want web-2 (web-1's token is live)", got)
		}
		mustApply(t, f, named(joinCmd(3, "n-web-1", "web-1", pki.RoleWorker)))
	})
	t.Run("mint-refuses-a-name-a-live-key-gives", func(t *testing.T) {
		f := withKey(t, false)
		before := stateBytes(t, f)
		if got := codes.Of(mint(t, f, 3, "web-3", pki.RoleWorker)); got != codes.NameTaken {
			t.Fatalf("admit web-3 while key web- is live: code %q, want %q", got, codes.NameTaken)
		}
		if !bytes.Equal(before, stateBytes(t, f)) {
			t.Fatal("a refused mint changed the state")
		}
		// Names the key cannot give are free: web-03, web-x, web-.
		for i, name := range []string{"web-03", "web-x", "webs-3"} {
			if err := mint(t, f, byte(50+i), name, pki.RoleWorker); err != nil {
				t.Fatalf("admit %s: %v", name, err)
			}
		}
	})
	t.Run("mint-refuses-a-second-live-token", func(t *testing.T) {
		f := withKey(t, false)
		if got := codes.Of(mint(t, f, 3, "db1", pki.RoleWorker)); got != codes.NameTaken {
			t.Fatalf("a second token for db1: code %q, want %q", got, codes.NameTaken)
		}
		mustApply(t, f, RevokeToken{Hash: secret(1).Hash(), At: t0.Add(time.Second), Actor: "uid:0"})
		if err := mint(t, f, 3, "db1", pki.RoleWorker); err != nil {
			t.Fatalf("a token for db1 once the first is revoked: %v", err)
		}
	})
	t.Run("jwt-name-claim-held-by-a-token", func(t *testing.T) {
		f := withKey(t, false)
		id := testIdentity("run-db1")
		id.Name, id.Prefix = "db1", ""
		if got := codes.Of(apply(t, f, named(identityJoinCmd(t, id, "m")))); got != codes.NameTaken {
			t.Fatalf("a JWT naming db1 while its token is live: code %q, want %q", got, codes.NameTaken)
		}
	})
	t.Run("expired-token-holds-nothing", func(t *testing.T) {
		f := withKey(t, true)
		c := named(keyJoinCmd(40, "late", "db1"))
		c.Admission.At = t0.Add(time.Hour) // db1's token expired (15 min); the key lives a day
		mustApply(t, f, c)
		if got := admittedName(t, f, c); got != "db1" {
			t.Fatalf("named %q, want db1: an expired token holds no name", got)
		}
	})
	t.Run("entries-before-the-rule-apply-as-they-did", func(t *testing.T) {
		f := withKey(t, true)
		c := keyJoinCmd(40, "old", "db1") // written before issue 52: no Names
		mustApply(t, f, c)
		if got := admittedName(t, f, c); got != "db1" {
			t.Fatalf("a pre-issue-52 entry named %q; it replays as it applied then (db1)", got)
		}
	})
}

func TestKeyGives(t *testing.T) {
	for _, tc := range []struct {
		prefix, name string
		want         bool
	}{
		{"web-", "web-1", true}, {"web-", "web-30", true}, {"web-", "web-0", false}, {"web-", "web-03", false},
		{"web-", "web-", false}, {"web-", "web-x", false}, {"web-", "web-1a", false}, {"web-", "db-1", false},
		{"web-", "web--1", false}, {"web-", "web-+1", false},
	} {
		if got := KeyGives(tc.prefix, tc.name); got != tc.want {
			t.Errorf("KeyGives(%q, %q) = %v, want %v", tc.prefix, tc.name, got, tc.want)
		}
	}
}
