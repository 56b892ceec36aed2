package state

import (
	"slices"

	"github.com/meshd/meshd/pki"
)

// A node that leaves, fails its join or is removed keeps a copy of the
// gossip keys it ran (node.json). The key is not proof of identity
// (gossip rides the overlay), but it is defence in depth, so the cluster
// owes a rotation for every such node: the state change records the debt
// and the control plane rotates until none is left (issue 27). The debt
// lives in raft, so a leader change, a restart or a stalled rotation
// loses none of it, and nothing compares clocks.

// oweKeys records that node id left the cluster with the current keys.
// A stock Nebula member (role nebula) never held them: nothing is owed.
func (s *Snapshot) oweKeys(id string) {
	if n, ok := s.Nodes[id]; ok && n.Role == pki.RoleNebula {
		return
	}
	if s.Cluster == nil || slices.Contains(s.Cluster.KeysOwed, id) || slices.Contains(s.Cluster.KeysPaying, id) {
		return
	}
	s.Cluster.KeysOwed = append(s.Cluster.KeysOwed, id)
}

// payKeys moves what is owed to the rotation whose install step this is:
// its drop step pays it. A node owed after the install may have fetched
// the installed key, so it waits for the next rotation. A rotation that
// stalled after its install keeps what it was paying for the next one.
func (c *Cluster) payKeys() {
	for _, id := range c.KeysOwed {
		if !slices.Contains(c.KeysPaying, id) {
			c.KeysPaying = append(c.KeysPaying, id)
		}
	}
	c.KeysOwed = nil
}

// KeysDebt are the nodes a gossip key rotation is still owed for (owed,
// or paid by a rotation that has not dropped the old key yet).
func (c Cluster) KeysDebt() []string {
	return slices.Concat(c.KeysPaying, c.KeysOwed)
}
