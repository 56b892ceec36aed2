package state

import (
	"fmt"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// An ephemeral node (Node.Ephemeral, issue 31) is removed by the cluster
// once gossip has seen it failed or left for the ephemeral window: the
// raft leader removes it as `meshctl remove` does (its certificates
// revoked, the members' acknowledgements asked and recorded), then
// forgets it (ForgetNode): its record goes, so its name and overlay IP
// are free for the next admission, while its revocations stay until the
// certificates expire.

// EphemeralAllowed reports whether a node of role may be ephemeral: a
// worker only (codes.BadRole otherwise). Removing a control node changes
// raft's configuration and may cost the quorum; the cluster does not do
// that on its own on a gossip timer. Admissions check it before they
// record a node ephemeral.
func EphemeralAllowed(role pki.Role) error {
	if role != pki.RoleWorker {
		return codes.Wrap(codes.BadRole, fmt.Errorf("a %s node cannot be ephemeral: only workers are", role))
	}
	return nil
}
