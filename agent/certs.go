package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// internalNebulaCertPath returns the caller's current Nebula host cert.
const internalNebulaCertPath = "/v1/self/nebula-cert"

// renewDue reports whether a certificate issued at issued and expiring at
// expires is past 2/3 of its lifetime at now.
func renewDue(issued, expires, now time.Time) bool {
	if issued.IsZero() || !expires.After(issued) {
		return true
	}
	return !now.Before(issued.Add(expires.Sub(issued) * 2 / 3))
}

// renewNebulaCerts runs on the CA holder (leader or not: writes forward to
// the leader): every active
// node whose Nebula host certificate is missing from its record or past 2/3
// of its lifetime gets a new one, signed for the key and overlay IP the
// node enrolled with, recorded through raft.
func (rt *runtime) renewNebulaCerts(ctx context.Context) {
	if rt.ca == nil || rt.raft == nil {
		return
	}
	cluster, ok := rt.raft.FSM().Cluster()
	if !ok {
		return
	}
	now := rt.now()
	for _, n := range rt.raft.FSM().Nodes() {
		if n.State != state.NodeActive || len(n.NebulaPublicKey) == 0 {
			continue
		}
		if len(n.NebulaCert) > 0 && !renewDue(n.NebulaIssued, n.NebulaExpires, now) {
			continue
		}
		if err := rt.renewNebula(ctx, n, cluster.Overlay.Bits(), now); err != nil {
			rt.log.Warn("Nebula certificate renewal failed", "code", codes.OrInternal(err), "node", n.Name, "err", err)
		}
	}
}

func (rt *runtime) renewNebula(ctx context.Context, n state.Node, bits int, now time.Time) error {
	certPEM, err := rt.ca.SignNebula(pki.NebulaRequest{PublicKey: n.NebulaPublicKey, Name: n.Name,
		IP: netip.PrefixFrom(n.OverlayIP, bits), Groups: []string{string(n.Role)}, Lifetime: rt.certLifetime}, now)
	if err != nil {
		return err
	}
	fp, expires, err := pki.NebulaCertInfo(certPEM)
	if err != nil {
		return err
	}
	if err := rt.write(ctx, &state.RenewNebula{NodeID: n.ID, Cert: certPEM, Fingerprint: fp,
		Issued: now, Expires: expires, At: now, Actor: rt.facts.NodeID}); err != nil {
		return err
	}
	rt.log.Info("Nebula certificate renewed", "code", codes.EventCertRenewed, "node", n.Name, "expires", expires)
	return nil
}

// adoptRenewedCert picks up a newer Nebula host certificate the cluster
// holds for this node: from its own raft state on a control node, from a
// control node over mTLS on a worker (only once its own cert is due). The
// cert is checked against the CA, this node's key and overlay IP, saved
// atomically, and the next reconcile reloads Nebula with it.
func (rt *runtime) adoptRenewedCert(ctx context.Context) {
	own := rt.identity()
	cur, err := nebulaValidity(own.NebulaCert)
	if err != nil {
		rt.log.Warn("own Nebula certificate unreadable", "err", err)
		return
	}
	var next []byte
	if rt.raft != nil {
		if n, ok := rt.raft.FSM().Node(rt.facts.NodeID); ok {
			next = n.NebulaCert
		}
	} else {
		if !renewDue(cur.issued, cur.expires, rt.now()) {
			return
		}
		if next, err = rt.fetchNebulaCert(ctx); err != nil {
			rt.log.Debug("renewed Nebula certificate not fetched", "err", err)
			return
		}
	}
	if len(next) == 0 || bytes.Equal(next, own.NebulaCert) {
		return
	}
	nv, err := nebulaValidity(next)
	if err != nil || !nv.expires.After(cur.expires) {
		return
	}
	if err := pki.CheckNebulaCert(own.NebulaCACert, next, own.NebulaKey, rt.overlayAddr(), rt.now()); err != nil {
		rt.log.Warn("renewed Nebula certificate refused", "code", codes.OverlayApply, "err", err)
		return
	}
	id := *own
	id.NebulaCert = next
	if err := id.Save(filepath.Join(rt.stateDir, identityDir)); err != nil {
		rt.log.Warn("renewed Nebula certificate not saved", "code", codes.StateDir, "err", err)
		return
	}
	rt.idMu.Lock()
	rt.id = &id
	rt.idMu.Unlock()
	rt.log.Info("adopted renewed Nebula certificate", "expires", nv.expires)
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

// fetchNebulaCert asks the control nodes, in order, for this node's
// current Nebula certificate.
func (rt *runtime) fetchNebulaCert(ctx context.Context) ([]byte, error) {
	var body struct{ Cert []byte }
	err := rt.askSeeds(ctx, internalNebulaCertPath, &body)
	return body.Cert, err
}

// handleNebulaCert serves GET /v1/self/nebula-cert to a member identified
// by its TLS leaf.
func (rt *runtime) handleNebulaCert(w http.ResponseWriter, r *http.Request) {
	var id string
	if r.TLS != nil {
		_, id, _, _ = pki.PeerIdentity(*r.TLS)
	}
	if id == "" {
		writeError(w, codes.Wrap(codes.PeerRoleDenied, errors.New("no client certificate of this cluster")))
		return
	}
	if err := rt.caughtUp(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	n, ok := rt.raft.FSM().Node(id)
	if !ok || n.State == state.NodeRemoved {
		writeError(w, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no active node %s", id)))
		return
	}
	writeJSON(w, http.StatusOK, struct{ Cert []byte }{n.NebulaCert})
}
