package member

import (
	"bytes"
	"context"
	"path/filepath"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// adoptRenewedCert picks up a newer Nebula host certificate the cluster
// holds for this node: from its own raft state on a control node, from a
// control node over mTLS on a worker (only once its own cert is due). The
// cert is checked against the CA, this node's key and overlay IP, saved
// atomically, and the next reconcile reloads Nebula with it.
func (rn *renewal) adoptRenewedCert(ctx context.Context) {
	rn.idMu.Lock()
	defer rn.idMu.Unlock()
	own := rn.identity()
	cur, err := nebulaValidity(own.NebulaCert)
	if err != nil {
		rn.log.Warn("own Nebula certificate unreadable", "err", err)
		return
	}
	due := control.RenewDue(cur.issued, cur.expires, rn.now(), rn.facts.NodeID) || rn.ca.reissuePending(true) ||
		rn.routesReissued(own.NebulaCert)
	next, err := rn.cluster.OwnNebulaCert(ctx, due)
	if err != nil {
		rn.log.Debug("renewed Nebula certificate not fetched", "err", err)
		return
	}
	if len(next) == 0 || bytes.Equal(next, own.NebulaCert) {
		return
	}
	nv, err := nebulaValidity(next)
	if err != nil || !nv.expires.After(cur.expires) {
		return
	}
	if err := pki.CheckNebulaCert(own.NebulaCACert, next, own.NebulaKey, rn.overlayAddr(), rn.now()); err != nil {
		rn.log.Warn("renewed Nebula certificate refused", "code", codes.OverlayApply, "err", err)
		return
	}
	id := *own
	id.NebulaCert = next
	if err := id.Save(filepath.Join(rn.stateDir, statedir.IdentityDir)); err != nil {
		rn.log.Warn("renewed Nebula certificate not saved", "code", codes.StateDir, "err", err)
		return
	}
	if err := rn.live.Swap(&id); err != nil {
		rn.log.Warn("renewed Nebula certificate not adopted", "code", codes.Internal, "err", err)
		return
	}
	rn.log.Info("adopted renewed Nebula certificate", "expires", nv.expires)
	rn.poke() // the overlay reloads with it
}

type validity struct{ issued, expires time.Time }

// nebulaValidity reads a host cert's validity; issued is NotBefore plus the
// backdating pki applies, i.e. the signing instant.
func nebulaValidity(certPEM []byte) (validity, error) {
	nb, na, err := pki.NebulaCertValidity(certPEM)
	if err != nil {
		return validity{}, err
	}
	return validity{issued: nb.Add(pki.LeafBackdate), expires: na}, nil
}
