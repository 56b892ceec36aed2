package state

import (
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// activeNode mints, admits, certifies and confirms node id as name.
func activeNode(t *testing.T, f *FSM, seed byte, id, name string, role pki.Role) {
	t.Helper()
	mustApply(t, f, MintToken{Record: tokenRecord(seed, name, role)})
	mustApply(t, f, joinCmd(seed, id, name, role))
	mustApply(t, f, certsCmd(id))
	mustApply(t, f, ConfirmJoin{NodeID: id, At: t0.Add(3 * time.Minute)})
}

// TestSetCAHolder: custody moves only from the holder on record, for the
// cluster's CA, to another active control node; anything else is refused
// with its code and nothing changed. A move is audited, and a removal of
// the old holder is allowed once it no longer holds the CA.
func TestSetCAHolder(t *testing.T) {
	f := bootstrapped(t)
	activeNode(t, f, 1, "n-c2", "c2", pki.RoleControl)
	activeNode(t, f, 2, "n-w1", "w1", pki.RoleWorker)
	mustApply(t, f, MintToken{Record: tokenRecord(3, "c3", pki.RoleControl)})
	mustApply(t, f, joinCmd(3, "n-c3", "c3", pki.RoleControl)) // stays joining
	fp := testCluster().CAFingerprint
	at := t0.Add(time.Hour)
	move := func(from, to string) SetCAHolder {
		return SetCAHolder{From: from, To: to, CAFingerprint: fp, At: at, Actor: "uid=0@ctl-0"}
	}
	other := move(originID, "n-c2")
	other.CAFingerprint = "ff"
	for _, tc := range []struct {
		name string
		cmd  SetCAHolder
		want codes.Code
	}{
		{"fail/from-not-holder", move("n-c2", "n-c2"), codes.CAHolderChanged},
		{"fail/stale-from", move("n-x", "n-c2"), codes.CAHolderChanged},
		{"fail/other-ca", other, codes.CAOtherCluster},
		{"fail/to-self", move(originID, originID), codes.CustodyTarget},
		{"fail/to-worker", move(originID, "n-w1"), codes.CustodyTarget},
		{"fail/to-joining", move(originID, "n-c3"), codes.CustodyTarget},
		{"fail/to-unknown", move(originID, "n-zz"), codes.CustodyTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stateBytes(t, f)
			if err := apply(t, f, tc.cmd); codes.Of(err) != tc.want {
				t.Fatalf("err %v (code %q), want %s", err, codes.Of(err), tc.want)
			}
			if string(stateBytes(t, f)) != string(before) {
				t.Fatal("a refused move changed the state")
			}
		})
	}
	// The holder cannot be removed; after the move the old one can.
	if err := apply(t, f, SetNodeState{NodeID: originID, State: NodeRemoved, At: at}); codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("remove the holder: %v", err)
	}
	mustApply(t, f, move(originID, "n-c2"))
	c, _ := f.Cluster()
	if c.CAHolder != "n-c2" {
		t.Fatalf("holder %s after the move", c.CAHolder)
	}
	// The same move again is stale: a re-run must find the record moved.
	if err := apply(t, f, move(originID, "n-c2")); codes.Of(err) != codes.CAHolderChanged {
		t.Fatalf("second move: %v", err)
	}
	if err := apply(t, f, SetNodeState{NodeID: "n-c2", State: NodeRemoved, At: at}); codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("remove the new holder: %v", err)
	}
	mustApply(t, f, SetNodeState{NodeID: originID, State: NodeRemoved, At: at})
	// A restore onto the origin's successor is audited as a restore.
	activeNode(t, f, 4, "n-c4", "c4", pki.RoleControl)
	r := move("n-c2", "n-c4")
	r.Restore = true
	mustApply(t, f, r)
	var got []codes.Code
	for _, e := range f.Audit() {
		if e.Code == codes.EventCAHandedOff || e.Code == codes.EventCARestored {
			got = append(got, e.Code)
			if e.Actor != "uid=0@ctl-0" {
				t.Fatalf("actor %q", e.Actor)
			}
		}
	}
	if len(got) != 2 || got[0] != codes.EventCAHandedOff || got[1] != codes.EventCARestored {
		t.Fatalf("audit %v", got)
	}
}
