package control

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TLSCertResponse is the caller's current TLS leaf as raft records it.
type TLSCertResponse struct {
	Cert []byte `json:"cert"`
}

// LeafValidity is when a TLS leaf was signed (NotBefore plus the
// backdating pki applies) and when it expires.
func LeafValidity(certPEM []byte) (issued, expires time.Time, err error) {
	c, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return c.NotBefore.Add(pki.LeafBackdate), c.NotAfter, nil
}

// RenewTLSCerts runs on the CA holder (leader or not: writes forward to
// the leader): every active node whose TLS leaf is past 2/3 of its
// lifetime gets a new one, signed for the public key raft records for it
// (no CSR: the node proved the key at admission) with the record's name,
// role, node id and IPs, and recorded through raft with RenewTLS. It
// returns when the next leaf on record falls due (zero if none), so the
// caller can wake up then.
func (p *Plane) RenewTLSCerts(ctx context.Context) (next time.Time) {
	if p.heldCA() == nil {
		return time.Time{}
	}
	now := p.clusterNow() // what the certificates are signed at
	index := p.raft.FSM().Index()
	if skip, due := p.tlsScan.skip(index, now); skip {
		return due
	}
	defer func() { p.tlsScan.scanned(index, next) }()
	cluster, _ := p.raft.FSM().Cluster()
	for _, n := range p.raft.FSM().Nodes() {
		if n.State != state.NodeActive || len(n.TLSCert) == 0 {
			continue
		}
		issued, expires, err := LeafValidity(n.TLSCert)
		if err != nil {
			p.log.Warn("TLS leaf on record unreadable", "code", codes.Internal, "node", n.Name, "err", err)
			continue
		}
		if !RenewDue(issued, expires, now, n.ID) && !reissueTLS(cluster, n) {
			next = earliest(next, RenewAt(issued, expires, n.ID))
			continue
		}
		if err := p.renewTLS(ctx, n, now); err != nil {
			p.log.Warn("TLS leaf renewal failed", "code", codes.OrInternal(err), "node", n.Name, "err", err)
			next = earliest(next, now.Add(RenewRetry(issued, expires)))
			continue
		}
		next = earliest(next, RenewAt(now, now.Add(p.cfg.tlsLifetime()), n.ID))
	}
	return next
}

func (p *Plane) renewTLS(ctx context.Context, n state.Node, now time.Time) error {
	return p.renewTLSFor(ctx, n, now, p.cfg.tlsLifetime())
}

// renewTLSFor is renewTLS with the new leaf's lifetime.
func (p *Plane) renewTLSFor(ctx context.Context, n state.Node, now time.Time, lifetime time.Duration) error {
	pub := n.TLSPublicKey
	if len(pub) == 0 { // recorded before TLSPublicKey existed: the key of the leaf on record
		var err error
		if pub, err = pki.PublicKeyDER(n.TLSCert); err != nil {
			return fmt.Errorf("public key of the leaf on record: %w", err)
		}
	}
	var ips []netip.Addr
	if n.Role == pki.RoleControl {
		ip, err := netip.ParseAddr(n.Underlay)
		if err != nil {
			return fmt.Errorf("underlay %q on record: %w", n.Underlay, err)
		}
		ips = []netip.Addr{ip}
	}
	ca, err := p.signingCA()
	if err != nil {
		return err
	}
	certPEM, err := ca.SignTLSKey(pki.KeyLeafRequest{PublicKey: pub, Name: n.Name, NodeID: n.ID, Role: n.Role,
		IPs: ips, Lifetime: lifetime}, now)
	if err != nil {
		return err
	}
	leaf, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		return err
	}
	if err := p.Write(ctx, &state.RenewTLS{NodeID: n.ID, Cert: certPEM, PublicKey: pub,
		Fingerprint: pki.FingerprintOf(leaf).String(), Expires: leaf.NotAfter, At: now, Actor: p.self()}); err != nil {
		return err
	}
	p.log.Info("TLS leaf renewed", "code", codes.EventTLSRenewed, "node", n.Name, "expires", leaf.NotAfter)
	return nil
}

// OwnTLSCert is the TLS leaf raft records for this node.
func (p *Plane) OwnTLSCert() []byte {
	if n, ok := p.raft.FSM().Node(p.cfg.NodeID); ok {
		return n.TLSCert
	}
	return nil
}

// handleTLSCert serves a member its own current TLS leaf, by the node id
// in the leaf it called with.
func (p *Plane) handleTLSCert(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := p.CaughtUp(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	n, ok := p.raft.FSM().Node(c.NodeID)
	if !ok || n.State != state.NodeActive {
		writeError(w, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no active node %s", c.NodeID)))
		return
	}
	apitype.WriteJSON(w, http.StatusOK, TLSCertResponse{Cert: n.TLSCert})
}

// RenewAt is when node's certificate valid from issued to expires falls
// due for renewal: within the window from 2/3 to 3/4 of its lifetime, at a
// point its node id picks (the first 8 bytes of its SHA-256 as a fraction
// of the window). A rack joined together is not renewed together (20 to
// 22.5 days into a 30-day TLS leaf), and the CA holder, which renews, and
// the node, which fetches the renewal, agree on when without asking.
func RenewAt(issued, expires time.Time, node string) time.Time {
	life := expires.Sub(issued)
	h := sha256.Sum256([]byte(node))
	frac := float64(binary.BigEndian.Uint64(h[:8])) / (1 << 64)
	return issued.Add(life*2/3 + time.Duration(frac*float64(life/12)))
}

// RenewRetry is how long a failed renewal waits before the next attempt:
// a thirtieth of the lifetime, between 100 ms and a minute.
func RenewRetry(issued, expires time.Time) time.Duration {
	return min(max(expires.Sub(issued)/30, 100*time.Millisecond), time.Minute)
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
