package desired

import (
	"testing"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// TestStockNebulaMember (issue 35): a stock Nebula member's record (role
// nebula, no underlay: a roaming device the lighthouses find) is a peer
// with no static host map entry but tracked as roaming; a gossip member claiming its record
// lends no liveness and is listed as unmatched (it has no gossip key, and
// its record says it does not gossip).
func TestStockNebulaMember(t *testing.T) {
	in := base()
	in.Records = append(in.Records, Record{ID: "id-phone", Name: "phone", Role: pki.RoleNebula, Overlay: ip("10.42.0.9")})
	in.Members = append(in.Members, Member{ID: "id-phone", Name: "phone", Role: pki.RoleNebula, Overlay: ip("10.42.0.9"),
		Addr: ip("10.42.0.9"), Status: gossip.StatusAlive})
	p, ok := Peers(in)["phone"]
	if !ok || p.Role != pki.RoleNebula || p.Gossip != "" {
		t.Fatalf("phone peer %+v (found %v), want a nebula peer with no gossip status", p, ok)
	}
	out := Compute(in)
	if _, ok := out.StaticHosts[ip("10.42.0.9")]; ok {
		t.Errorf("static hosts %v name the roaming stock member", out.StaticHosts)
	}
	if len(out.Roaming) != 1 || out.Roaming[0] != ip("10.42.0.9") {
		t.Errorf("roaming %v, want the stock member's address (tracked: revoking it closes its tunnels)", out.Roaming)
	}
	un := Unmatched(in)
	if len(un) != 1 || un[0].Name != "phone" || un[0].Reason != "a stock Nebula member does not gossip" {
		t.Errorf("unmatched %+v, want phone: a stock Nebula member does not gossip", un)
	}
}
