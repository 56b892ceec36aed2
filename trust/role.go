package trust

import (
	"fmt"

	"github.com/meshd/meshd/codes"
)

// Role is what a node may do in the cluster. It is carried in the TLS leaf
// (Subject OrganizationalUnit) and checked on every connection that needs it.
type Role string

const (
	RoleControl Role = "control" // raft member, serves enroll and internal API; leaf has server+client auth
	RoleWorker  Role = "worker"  // leaf has client auth only
	// RoleNebula is a member that runs stock Nebula (issue 35): a raft
	// record, an overlay IP and a Nebula certificate, no TLS leaf, no
	// gossip, no raft. No leaf ever names it: ParseRole refuses it.
	RoleNebula Role = "nebula"
)

// ParseRole accepts "control" or "worker"; anything else is codes.BadRole.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleControl, RoleWorker:
		return Role(s), nil
	}
	return "", codes.Wrap(codes.BadRole, fmt.Errorf("role %q: want worker or control", s))
}
