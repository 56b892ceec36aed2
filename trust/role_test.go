package trust

import (
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestParseRoleRefusesNebula: a TLS leaf or a --role flag names control
// or worker; the nebula role (a stock Nebula member) has no leaf, so no
// leaf's OU and no flag may claim it.
func TestParseRoleRefusesNebula(t *testing.T) {
	for _, ok := range []Role{RoleControl, RoleWorker} {
		if r, err := ParseRole(string(ok)); err != nil || r != ok {
			t.Errorf("ParseRole(%q) = %q, %v", ok, r, err)
		}
	}
	for _, bad := range []string{string(RoleNebula), "", "Control", "admin"} {
		if _, err := ParseRole(bad); codes.Of(err) != codes.BadRole {
			t.Errorf("ParseRole(%q) = %v, want %s", bad, err, codes.BadRole)
		}
	}
}

// TestNebulaIsAReservedGroup: every Nebula certificate carries its role as
// its first group, so no node group may be named after one, nebula included.
func TestNebulaIsAReservedGroup(t *testing.T) {
	for _, g := range []string{"control", "worker", "nebula", "any"} {
		if err := CheckNodeGroup(g); codes.Of(err) != codes.BadGroup {
			t.Errorf("CheckNodeGroup(%q) = %v, want %s", g, err, codes.BadGroup)
		}
		if err := CheckRuleGroup(g); err != nil {
			t.Errorf("CheckRuleGroup(%q) = %v, want nil: a rule may name a role", g, err)
		}
	}
}
