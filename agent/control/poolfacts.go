package control

import (
	"errors"
	"fmt"
	"slices"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// What a worker out of the gossip pool (`gossip_pool: false`) says by its
// facts instead of gossip (issue 54 item 3, step iv): its NAT (in the pool
// a gossip tag, agent/member/natpath.go), that it is out of the pool (the
// control nodes' gossip rejoin then skips it, rejoinTargets), and the
// revocation list version its Nebula blocks, which a removal's
// acknowledgement round reads from its record (revocationacks.go) where
// it asks the pool over gossip. Who says it is the caller's leaf; no
// signature is needed as a gossip answer's is.

// NATWords are the words a node's NAT is reported in (agent/member's NAT
// values; a member test holds the two lists equal).
var NATWords = []string{"unk", "open", "pp", "ei", "sym"}

// RevokedMargin is how far beyond the revocation list this node holds a
// reported version may be (a follower a few entries behind the leader
// takes a report of a list the member read from the leader); further is
// a list nobody holds.
const RevokedMargin = 256

// checkPoolFacts is BadRequest unless ch's NAT is one of NATWords, its
// Pool PoolIn or PoolOut (never out for a control node, which always
// gossips), and its Revoked a version of a list that exists.
func checkPoolFacts(n state.Node, ch state.FactChange) error {
	if ch.NAT != "" && !slices.Contains(NATWords, ch.NAT) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("facts report: NAT %q is not one of %v", ch.NAT, NATWords))
	}
	switch ch.Pool {
	case "", state.PoolIn:
	case state.PoolOut:
		if n.Role == pki.RoleControl {
			return codes.Wrap(codes.BadRequest, errors.New("facts report: a control node is always in the gossip pool"))
		}
	default:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("facts report: pool %q is not %q or %q", ch.Pool, state.PoolIn, state.PoolOut))
	}
	if ch.Revoked < 0 {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("facts report: revocation version %d", ch.Revoked))
	}
	return nil
}

// revokedTooFar is BadRequest when version is beyond the revocation list
// this node holds by more than RevokedMargin.
func (p *Plane) revokedTooFar(version int) error {
	if have := p.RevocationVersion(); version > have+RevokedMargin {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("facts report: revocation version %d, this control node's list is %d long", version, have))
	}
	return nil
}
