package state

import (
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestAdmitRecordsSeenFromAndRelay: an admission records the address the
// joiner advertised and, apart, the address its join came from (behind a
// NAT, the NAT's public one: DESIGN §11), and its relay offer.
func TestAdmitRecordsSeenFromAndRelay(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(t, f, MintToken{Record: tokenRecord(2, "w2", pki.RoleWorker)})
	nat := joinCmd(1, "n-w1", "w1", pki.RoleWorker)
	nat.Admission.Underlay, nat.Admission.SourceAddr = "192.168.1.10", "203.0.113.1"
	mustApply(t, f, nat)
	vol := joinCmd(2, "n-w2", "w2", pki.RoleWorker)
	vol.Admission.Relay = true
	mustApply(t, f, vol)

	w1, _ := f.Node("n-w1")
	if w1.Underlay != "192.168.1.10" || w1.SeenFrom != "203.0.113.1" || w1.Relay {
		t.Errorf("w1: underlay %q, seen from %q, relay %v; want 192.168.1.10, 203.0.113.1, false", w1.Underlay, w1.SeenFrom, w1.Relay)
	}
	w2, _ := f.Node("n-w2")
	if !w2.Relay || w2.SeenFrom != "198.51.100.9" {
		t.Errorf("w2: relay %v, seen from %q; want true, 198.51.100.9", w2.Relay, w2.SeenFrom)
	}
}

// TestSetRelay: a member's relay setting changes its record; the same
// value again changes nothing; a former or unknown node is refused.
func TestSetRelay(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(t, f, joinCmd(1, "n-w1", "w1", pki.RoleWorker))
	at := t0.Add(time.Hour)

	mustApply(t, f, SetRelay{NodeID: "n-w1", Relay: true, At: at})
	if n, _ := f.Node("n-w1"); !n.Relay || !n.Updated.Equal(at) {
		t.Fatalf("after SetRelay(true): relay %v, updated %v", n.Relay, n.Updated)
	}
	mustApply(t, f, SetRelay{NodeID: "n-w1", Relay: true, At: at.Add(time.Hour)})
	if n, _ := f.Node("n-w1"); !n.Updated.Equal(at) {
		t.Errorf("the same setting again moved Updated to %v", n.Updated)
	}
	mustApply(t, f, SetRelay{NodeID: "n-w1", Relay: false, At: at})
	if n, _ := f.Node("n-w1"); n.Relay {
		t.Error("SetRelay(false) left the offer on record")
	}

	if err := apply(t, f, SetRelay{NodeID: "n-nobody", Relay: true, At: at}); codes.Of(err) != codes.NodeUnknown {
		t.Errorf("unknown node: %v, want %s", err, codes.NodeUnknown)
	}
	mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeLeft, At: at})
	if err := apply(t, f, SetRelay{NodeID: "n-w1", Relay: true, At: at}); codes.Of(err) != codes.BadRequest {
		t.Errorf("left node: %v, want %s", err, codes.BadRequest)
	}
}
