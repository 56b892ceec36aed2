package state

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/pki"
)

// TestRecordsIndexed: Node and NodeByName answer from the shared
// records' indexes what a scan of the state would: a record by id, the
// holder of a name (a former record of the same name holds none), and
// nothing for an unknown id or name; after a change and after a restore
// they follow the state.
func TestRecordsIndexed(t *testing.T) {
	f := admitFixture(t) // ctl-0, gone (removed), w9
	_ = f.Nodes()        // built: the lookups below use the indexes
	if f.view.Load() == nil {
		t.Fatal("Nodes did not build the shared records")
	}
	for _, n := range f.Nodes() {
		got, ok := f.Node(n.ID)
		if !ok || got.ID != n.ID || got.Name != n.Name {
			t.Errorf("Node(%s) = %+v, %v", n.ID, got, ok)
		}
		held, ok := f.NodeByName(n.Name)
		want, wantOK := f.s.nodeByName(n.Name) // the scan it replaces
		if ok != wantOK || held.ID != want.ID {
			t.Errorf("NodeByName(%s) = %s, %v; the scan finds %s, %v", n.Name, held.ID, ok, want.ID, wantOK)
		}
	}
	if _, ok := f.NodeByName("gone"); ok {
		t.Error("a removed record holds its name")
	}
	if _, ok := f.Node("nobody"); ok {
		t.Error("Node of an unknown id found a record")
	}
	mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
	if n, ok := f.NodeByName("w1"); !ok || n.ID != "n-w1" || n.State != NodeJoining {
		t.Fatalf("after an admission NodeByName(w1) = %+v, %v", n, ok)
	}
	var b bytes.Buffer
	if err := WriteSnapshot(&b, bootstrapped(t).snapshot()); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(&b)); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.NodeByName("w1"); ok {
		t.Fatal("after restoring a snapshot without w1, NodeByName(w1) still finds it")
	}
	if _, ok := f.Node(originID); !ok || len(f.Nodes()) != 1 {
		t.Fatalf("after the restore: %d records", len(f.Nodes()))
	}
}

// TestSharedRecordsGuarded: the reads share one list; a reader that
// changes a record of it, or writes into a record's byte slice, is
// caught by the guard at the next Apply (and by CheckShared), while one
// that copies first (slices.Clone), changes a record taken by value, or
// appends to a record's slice (clipped: the append copies) changes
// nothing shared. An Apply never writes into records already handed
// out: a reader holding the list from before a change keeps it as it was.
func TestSharedRecordsGuarded(t *testing.T) {
	t.Run("ok/readers-that-copy", func(t *testing.T) {
		f := admitFixture(t)
		var caught []error
		f.TestOnlyGuardShared(func(err error) { caught = append(caught, err) })
		own := slices.Clone(f.Nodes())
		own[0].Name = "mallory"
		slices.Reverse(own)
		for _, n := range f.Nodes() {
			n.State = NodeRemoved
			n.Retired = append(n.Retired, "ff")
			n.TLSCert = append(n.TLSCert, 'x')
		}
		n, _ := f.NodeByName("w9")
		n.Groups = append(n.Groups, "extra")
		held := f.Nodes()
		before := slices.Clone(held)
		mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
		mustApply(t, f, certsCmd("n-w1"))
		if len(caught) > 0 || f.TestOnlyCheckShared() != nil {
			t.Fatalf("readers that copy were reported: %v", caught)
		}
		for i := range held {
			if held[i].ID != before[i].ID || held[i].State != before[i].State || !bytes.Equal(held[i].TLSCert, before[i].TLSCert) {
				t.Fatalf("an Apply changed a list handed out before it: %+v, was %+v", held[i], before[i])
			}
		}
	})
	for _, tc := range []struct {
		name  string
		write func(f *FSM)
	}{
		{"fail/record-field", func(f *FSM) { f.Nodes()[0].Name = "mallory" }},
		{"fail/sort-in-place", func(f *FSM) { slices.Reverse(f.Nodes()) }},
		{"fail/byte-slice", func(f *FSM) { n, _ := f.Node(originIDOf(f)); n.NebulaPublicKey[0] ^= 0xff }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := admitFixture(t)
			var caught []error
			f.TestOnlyGuardShared(func(err error) { caught = append(caught, err) })
			_ = f.Nodes()
			tc.write(f)
			if err := f.TestOnlyCheckShared(); err == nil || !strings.Contains(err.Error(), "a reader changed the shared") {
				t.Fatalf("CheckShared = %v, want the write caught", err)
			}
			mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
			if len(caught) != 1 {
				t.Fatalf("the guard reported %d writes before the Apply, want 1", len(caught))
			}
		})
	}
}

// originIDOf is the id of the fixture's control node with a Nebula key.
func originIDOf(f *FSM) string {
	for _, n := range f.Nodes() {
		if len(n.NebulaPublicKey) > 0 {
			return n.ID
		}
	}
	return ""
}
