package agent

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// TestReloadFirewallNotMember: on a node that is not a running member, a
// reload that changes the firewall or MTU needs no restart, and a bad rule
// is refused with its code; the runtime started later takes the reloaded
// rules.
func TestReloadFirewallNotMember(t *testing.T) {
	next := withCfg(func(c *config.File) {
		c.OverlayMTU = 1400
		c.Firewall.Inbound = []mesh.FirewallRule{{Port: "22", Proto: "tcp", Group: "control"}}
	})
	a, _, _ := reloadAgent(t, &next, nil)
	ws, err := a.Reload()
	if err != nil || len(ws) != 0 {
		t.Fatalf("Reload() = %v, %v; want no error and no warning", ws, err)
	}
	if p := a.startPolicy(); p.MTU != 1400 || !reflect.DeepEqual(p.Inbound, next.Firewall.Inbound) {
		t.Errorf("a runtime started now would run %+v", p)
	}
	next.Firewall.Outbound = []mesh.FirewallRule{{Port: "x", Proto: "tcp", Host: "any"}}
	if _, err := a.Reload(); codes.Of(err) != codes.ReloadRefused || !strings.Contains(err.Error(), string(codes.FirewallRule)) ||
		!strings.Contains(err.Error(), "outbound[0].port") {
		t.Fatalf("Reload() with a bad rule = %v, want %s listing %s for outbound[0].port", err, codes.ReloadRefused, codes.FirewallRule)
	}
	if p := a.startPolicy(); !reflect.DeepEqual(p.Outbound, mesh.AnyAny()) {
		t.Errorf("a refused reload changed the policy: %+v", p)
	}
}
