package enroll

import (
	"fmt"
	"sync"

	"github.com/meshd/meshd/codes"
)

// A seed is a current control node only (issue 52 item 3, DESIGN §12).
// The cluster revokes every unused token naming a control node that
// departs, so a secret a copy of that node harvests admits nobody; and
// the joiner, before it sends the secret, judges the seed's own leaf
// against the freshest revocation list it has seen in this enrollment:
// every seed's time answer (TimeResponse) carries the version of the list
// it knows and the leaves of the control nodes that departed. A seed
// listed there is refused with codes.SeedRevoked, nothing sent, and the
// next seed is asked. A stale copy does not list itself; a current seed
// asked before it does.

// SeedRevocations is what a Ledger may also answer for the time endpoint:
// the revocation list's version and the fingerprints of departed control
// nodes' TLS leaves.
type SeedRevocations interface {
	SeedRevocations() (version int, revokedLeaves []string)
}

// seenRevocations is the freshest revocation answer of one enrollment.
type seenRevocations struct {
	mu      sync.Mutex
	version int
	leaves  map[string]bool
}

// learn keeps tr's list when it is at least as fresh as the one held.
func (r *seenRevocations) learn(tr TimeResponse) {
	if tr.Revocations <= 0 {
		return // a release before issue 52 says nothing
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if tr.Revocations < r.version {
		return
	}
	r.version, r.leaves = tr.Revocations, make(map[string]bool, len(tr.RevokedSeeds))
	for _, fp := range tr.RevokedSeeds {
		r.leaves[fp] = true
	}
}

// judge refuses s when its leaf is revoked in the freshest list seen.
func (r *seenRevocations) judge(s *session) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.leaves[s.leaf] {
		return nil
	}
	return codes.Wrap(codes.SeedRevoked, fmt.Errorf("seed %s presents the certificate of a control node that left the cluster "+
		"(revocation list version %d); nothing was sent to it", s.seed, r.version))
}
