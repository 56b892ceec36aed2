package control

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// RenewDue reports whether node's certificate issued at issued and
// expiring at expires is due for renewal at now (RenewAt). An unknown or
// empty validity is due.
func RenewDue(issued, expires, now time.Time, node string) bool {
	if issued.IsZero() || !expires.After(issued) {
		return true
	}
	return !now.Before(RenewAt(issued, expires, node))
}

// RenewNebulaCerts runs on the CA holder (leader or not: writes forward to
// the leader): every active node whose Nebula host certificate is missing
// from its record, due (RenewAt), or holds other routes than the node is
// approved for (issue 33: an approval or withdrawal reissues it at once)
// gets a new one, signed for the key and overlay IP the node enrolled
// with and its approved routes, recorded through raft.
func (p *Plane) RenewNebulaCerts(ctx context.Context) {
	if p.heldCA() == nil {
		return
	}
	cluster, ok := p.raft.FSM().Cluster()
	if !ok {
		return
	}
	now := p.clusterNow() // what the certificates are signed at
	index := p.raft.FSM().Index()
	if skip, _ := p.nebulaScan.skip(index, now); skip {
		return
	}
	var next time.Time
	defer func() { p.nebulaScan.scanned(index, next) }()
	for _, n := range p.raft.FSM().Nodes() {
		if n.State != state.NodeActive || len(n.NebulaPublicKey) == 0 || n.Role == pki.RoleNebula {
			// A stock Nebula member has no meshd to fetch a renewed
			// certificate: it renews with a renewal token (nebulamember.go).
			continue
		}
		if len(n.NebulaCert) > 0 && !RenewDue(n.NebulaIssued, n.NebulaExpires, now, n.ID) && !reissueNebula(cluster, n) && routesMatch(n) {
			next = earliest(next, RenewAt(n.NebulaIssued, n.NebulaExpires, n.ID))
			continue
		}
		if err := p.renewNebula(ctx, n, cluster.Overlay.Bits(), now); err != nil {
			p.log.Warn("Nebula certificate renewal failed", "code", codes.OrInternal(err), "node", n.Name, "err", err)
			next = earliest(next, now) // the next pass tries again, as before
		}
	}
}

func (p *Plane) renewNebula(ctx context.Context, n state.Node, bits int, now time.Time) error {
	return p.renewNebulaFor(ctx, n, bits, now, p.cfg.NebulaLifetime)
}

// renewNebulaFor is renewNebula with the new certificate's lifetime.
func (p *Plane) renewNebulaFor(ctx context.Context, n state.Node, bits int, now time.Time, lifetime time.Duration) error {
	ca, err := p.signingCA()
	if err != nil {
		return err
	}
	lifetime = laterThanCurrent(n, now, lifetime)
	certPEM, err := ca.SignNebula(pki.NebulaRequest{PublicKey: n.NebulaPublicKey, Name: n.Name,
		IP: netip.PrefixFrom(n.OverlayIP, bits), IP6: p.overlay6For(ca, n), Groups: pki.NebulaGroups(n.Role, n.Groups), Routes: n.ApprovedRoutes(),
		Lifetime: lifetime}, now)
	if err != nil {
		return err
	}
	fp, expires, err := pki.NebulaCertInfo(certPEM)
	if err != nil {
		return err
	}
	if err := p.Write(ctx, &state.RenewNebula{NodeID: n.ID, Cert: certPEM, Fingerprint: fp,
		Issued: now, Expires: expires, Routes: n.ApprovedRoutes(), At: now, Actor: p.self()}); err != nil {
		return err
	}
	p.log.Info("Nebula certificate renewed", "code", codes.EventCertRenewed, "node", n.Name, "expires", expires)
	return nil
}

// OwnNebulaCert is the Nebula host cert raft records for this node.
func (p *Plane) OwnNebulaCert() []byte {
	if n, ok := p.raft.FSM().Node(p.cfg.NodeID); ok {
		return n.NebulaCert
	}
	return nil
}

// routesMatch reports whether n's current Nebula certificate holds
// exactly the routes n is approved for (both sorted alike).
func routesMatch(n state.Node) bool {
	return slices.Equal(n.NebulaRoutes, n.ApprovedRoutes())
}

// laterThanCurrent is lifetime, or a few seconds more when a certificate
// signed now would expire no later than n's current one: a reissue within
// the second n's certificate was signed in (a route approved right after
// its join) ends on the same whole second, and raft takes only a later
// expiry (state.RenewNebula). Without it the reissue failed and waited
// for the next follow pass, up to 30 s (e2e.TestExitNode, 1 run in 6).
func laterThanCurrent(n state.Node, now time.Time, lifetime time.Duration) time.Duration {
	if lifetime <= 0 {
		lifetime = pki.DefaultNebulaLifetime
	}
	end := now.Add(lifetime).UTC().Truncate(time.Second)
	if n.NebulaFingerprint == "" || end.After(n.NebulaExpires) {
		return lifetime
	}
	return lifetime + n.NebulaExpires.Sub(end) + time.Second
}
