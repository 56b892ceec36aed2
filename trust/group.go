package trust

import (
	"fmt"
	"slices"

	"github.com/meshd/meshd/codes"
)

// MaxGroups bounds the node groups one admission may carry.
const MaxGroups = 8

// CheckNodeGroup accepts a node group an operator sets at admission
// (`meshctl admit NAME --group G`): 1-32 of a-z, 0-9 and '-', starting
// with a letter and not ending with '-'. The role names and Nebula's
// wildcard "any" are refused: every Nebula certificate carries its role as
// a group, so a node group named "control" would let a worker match a
// firewall rule meant for control nodes. Anything else is codes.BadGroup.
func CheckNodeGroup(g string) error {
	if err := checkGroupSyntax(g); err != nil {
		return err
	}
	if isRoleOrAny(g) {
		return codes.Wrap(codes.BadGroup, fmt.Errorf("group %q is reserved (the roles control, worker and nebula are groups of every certificate, any is Nebula's wildcard)", g))
	}
	return nil
}

// CheckNodeGroups checks each group (CheckNodeGroup), refuses duplicates
// and more than MaxGroups.
func CheckNodeGroups(gs []string) error {
	if len(gs) > MaxGroups {
		return codes.Wrap(codes.BadGroup, fmt.Errorf("%d groups: at most %d", len(gs), MaxGroups))
	}
	for i, g := range gs {
		if err := CheckNodeGroup(g); err != nil {
			return err
		}
		if slices.Contains(gs[:i], g) {
			return codes.Wrap(codes.BadGroup, fmt.Errorf("group %q given twice", g))
		}
	}
	return nil
}

// CheckRuleGroup accepts a group a firewall rule may name: a role, "any",
// or a valid node group name.
func CheckRuleGroup(g string) error {
	if isRoleOrAny(g) {
		return nil
	}
	return CheckNodeGroup(g)
}

func checkGroupSyntax(g string) error {
	bad := len(g) == 0 || len(g) > 32 || g[0] < 'a' || g[0] > 'z' || g[len(g)-1] == '-'
	for i := 0; i < len(g) && !bad; i++ {
		c := g[i]
		bad = !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if bad {
		return codes.Wrap(codes.BadGroup, fmt.Errorf("group %q: want 1-32 of a-z, 0-9, '-', starting with a letter, not ending with '-'", g))
	}
	return nil
}

// isRoleOrAny reports whether g is a role's group or Nebula's wildcard.
func isRoleOrAny(g string) bool {
	return g == string(RoleControl) || g == string(RoleWorker) || g == string(RoleNebula) || g == "any"
}
