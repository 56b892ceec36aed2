package member

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/pki"
)

// TestOverlayChangeMatchesWhole: on a running userspace Nebula, a pass
// of the overlay loop takes the change path (desired.Tracker, then
// Mesh.Apply) for membership changes, and what it leaves applied is the
// config the whole-config path computes for the same inputs, which
// Nebula verifies. A change of routes, and a cut-off node, take the
// whole-config path, and the next membership change the change path
// again.
func TestOverlayChangeMatchesWhole(t *testing.T) {
	ov, in := testWorker(t, 12)
	pass := func(what string, wantChange bool) {
		t.Helper()
		ov.lastReload = ov.lastReload.AddDate(-1, 0, 0) // no gap
		// reconcileOverlay's first step, then the pass itself, which
		// takes the whole-config path when the first did not.
		if took := ov.applyMemberChange(in); took != wantChange {
			t.Fatalf("%s: the change path took the pass: %v, want %v", what, took, wantChange)
		}
		ov.lastReload = ov.lastReload.AddDate(-1, 0, 0)
		if wait := ov.reconcileOverlay(in); wait != 0 {
			t.Fatalf("%s: the pass waits %s", what, wait)
		}
		if b, _ := ov.overlayErr.Load().(errBox); b.err != nil {
			t.Fatalf("%s: %v", what, b.err)
		}
		if !ov.tracking {
			t.Fatalf("%s: not tracking after the pass", what)
		}
		applied := ov.applied()
		if want := ov.meshConfigFor(in); !reflect.DeepEqual(applied, want) {
			t.Fatalf("%s: applied\n%+v\nthe whole-config path computes\n%+v", what, applied, want)
		}
		if err := ov.mesh.Verify(applied); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	pass("first pass", false)
	change := func(f func()) {
		in.Records = slices.Clone(in.Records) // a fresh copy, as overlayInputs reads one
		in.Blocklist = slices.Clone(in.Blocklist)
		f()
	}
	change(func() { in.Records[5].Underlay = netip.MustParseAddrPort("198.51.100.5:4242") })
	pass("a peer moved", true)
	change(func() { in.Records = append(in.Records, benchRecord(40)) })
	pass("a peer added", true)
	change(func() {
		in.Records = slices.Delete(in.Records, 7, 8)
		in.Blocklist = append(in.Blocklist, fmt.Sprintf("%064x", 7))
	})
	pass("a peer removed, its certificate blocked", true)
	change(func() { in.Records[4].Relay = true })
	pass("a peer offers itself as a relay", true)
	change(func() {
		r := benchRecord(41)
		r.Role, r.Name, r.ID = pki.RoleControl, "c4", "id-c4"
		in.Records = append(in.Records, r)
	})
	pass("a control node added", true)
	change(func() { in.Gone = append(slices.Clone(in.Gone), in.Records[3].ID) })
	pass("a peer gone in raft", true)
	change(func() {
		in.Records[6].Routes = []desired.RecordRoute{{Prefix: netip.MustParsePrefix("172.20.0.0/24"), Carrier: true}}
	})
	pass("a route approved", false)
	pass("the pass after", true) // nothing changed
	change(func() { in.Records[8].Underlay = netip.MustParseAddrPort("198.51.100.8:4242") })
	pass("a peer moved", true)
	change(func() { in.Blocklist = in.Blocklist[1:] })
	pass("a certificate unblocked", true)
}
