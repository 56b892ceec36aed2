package config

import (
	"fmt"

	"github.com/meshd/meshd/pki"
)

// CheckRole checks the settings that depend on this node's role, which
// the file does not know (the state dir's node.json has it): a control
// node keeps the gossip pool (its raft reconcile, key and CA reports and
// its own liveness ride it), so `gossip_pool: false` is refused there,
// coded ConfigInvalid, naming the key.
func (c File) CheckRole(role pki.Role) error {
	if c.GossipPool || role != pki.RoleControl {
		return nil
	}
	probs := Errors{}
	probs.Problems = append(probs.Problems, &Error{Field: "gossip_pool", Value: "false",
		Err:  fmt.Errorf("a %s node stays in the gossip pool", role),
		Hint: "remove gossip_pool from this control node's meshd.yaml; only workers may leave the pool"})
	return probs.err()
}
