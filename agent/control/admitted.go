package control

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// The CA holder signs only what raft admitted: a sign request names a
// node, and the certificate certifies what raft records for it (name,
// role, overlay IP, the public keys recorded at admission, a control
// node's underlay IP), only while the node is joining and has no
// certificate yet. Anything else is codes.SignRefused. The requester's
// expectations (name, role, IP) are compared, never used.

// signAdmittedTLS signs the TLS leaf of the joining node req names, for
// the key in req.CSR, which must be the key raft recorded.
func (p *Plane) signAdmittedTLS(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	n, _, ca, err := p.admittedFor(ctx, req)
	if err != nil {
		return nil, err
	}
	key, err := pki.CSRPublicKey(req.CSR)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(key, n.TLSPublicKey) {
		return nil, refuse(req, "the CSR's key is not the TLS key recorded at admission")
	}
	var ips []netip.Addr
	if n.Role == pki.RoleControl {
		u, err := netip.ParseAddr(n.Underlay)
		if err != nil {
			return nil, refuse(req, "the control node's record has no usable underlay address")
		}
		ips = []netip.Addr{u.Unmap()}
	}
	return ca.SignTLS(pki.LeafRequest{CSR: req.CSR, Name: n.Name, NodeID: n.ID, Role: n.Role, IPs: ips,
		Lifetime: p.cfg.tlsLifetime()}, p.clusterNow())
}

// signAdmittedNebula signs the Nebula host certificate of the joining node
// req names, for the Nebula key and overlay IP raft recorded.
func (p *Plane) signAdmittedNebula(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	if req.Renewal != (enroll.TokenHash{}) {
		return p.renewNebulaMember(ctx, req)
	}
	n, bits, ca, err := p.admittedFor(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(n.NebulaPublicKey) == 0 {
		return nil, refuse(req, "the record has no Nebula public key")
	}
	lifetime := p.cfg.NebulaLifetime
	if n.Role == pki.RoleNebula {
		lifetime = p.nebulaMemberLifetime(n.Token) // no meshd renews it: the token's lifetime, 30 days by default
	}
	return ca.SignNebula(pki.NebulaRequest{PublicKey: n.NebulaPublicKey, Name: n.Name,
		IP: netip.PrefixFrom(n.OverlayIP, bits), IP6: p.overlay6For(ca, n), Groups: pki.NebulaGroups(n.Role, n.Groups),
		Lifetime: lifetime}, p.clusterNow())
}

// overlay6For is the IPv6 overlay address (with the cluster's IPv6 prefix
// length) a Nebula certificate for n signed by ca carries: n's, when ca is
// dual-stack; none from an IPv4-only CA (the current one, while a move to
// v2 certificates is in its trust phase).
func (p *Plane) overlay6For(ca *pki.CA, n state.Node) netip.Prefix {
	if !ca.DualStack() {
		return netip.Prefix{}
	}
	c, _ := p.raft.FSM().Cluster()
	return c.Overlay6Prefix(n)
}

// admittedFor returns the record of the joining node req names and the
// overlay prefix length, after a read index (so an admission written a
// moment ago through another control node is seen), or codes.SignRefused.
func (p *Plane) admittedFor(ctx context.Context, req enroll.SignRequest) (state.Node, int, *pki.CA, error) {
	if err := p.SyncRead(ctx); err != nil {
		return state.Node{}, 0, nil, err
	}
	// After the read index: a node the record no longer names (custody
	// moved) signs nothing.
	ca, err := p.signingCA()
	if err != nil {
		return state.Node{}, 0, nil, err
	}
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return state.Node{}, 0, nil, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	n, ok := p.raft.FSM().Node(req.NodeID)
	switch {
	case req.NodeID == "" || !ok:
		return state.Node{}, 0, nil, refuse(req, "raft records no admission of this node")
	case n.State != state.NodeJoining:
		return state.Node{}, 0, nil, refuse(req, fmt.Sprintf("the node is %s, not joining", n.State))
	case n.TLSFingerprint != "" || n.NebulaFingerprint != "" || len(n.TLSCert) > 0 || len(n.NebulaCert) > 0:
		return state.Node{}, 0, nil, refuse(req, "the node already has certificates")
	case req.Name != "" && req.Name != n.Name:
		return state.Node{}, 0, nil, refuse(req, fmt.Sprintf("the request names %q, raft %q", req.Name, n.Name))
	case req.Role != "" && req.Role != n.Role:
		return state.Node{}, 0, nil, refuse(req, fmt.Sprintf("the request asks role %s, raft records %s", req.Role, n.Role))
	case req.OverlayIP.IsValid() && req.OverlayIP != netip.PrefixFrom(n.OverlayIP, c.Overlay.Bits()):
		return state.Node{}, 0, nil, refuse(req, fmt.Sprintf("the request asks overlay %v, raft records %v", req.OverlayIP, n.OverlayIP))
	}
	return n, c.Overlay.Bits(), ca, nil
}

// refuse is codes.SignRefused for req with why.
func refuse(req enroll.SignRequest, why string) error {
	return codes.Wrap(codes.SignRefused, fmt.Errorf("sign for node %q: %s", req.NodeID, why))
}

// leafMatches checks that a TLS leaf certifies what raft records for the
// joining node n: its key, id, name and role.
func leafMatches(leaf *x509.Certificate, n state.Node) error {
	key, err := x509.MarshalPKIXPublicKey(leaf.PublicKey)
	if err != nil || !bytes.Equal(key, n.TLSPublicKey) {
		return errors.New("the TLS leaf does not certify the recorded key")
	}
	role, err := pki.RoleOf(leaf)
	if err != nil || role != n.Role || pki.NodeIDOf(leaf) != n.ID || leaf.Subject.CommonName != n.Name {
		return fmt.Errorf("the TLS leaf names %s/%s (%s), the record %s/%s (%s)", leaf.Subject.CommonName, pki.NodeIDOf(leaf), role, n.Name, n.ID, n.Role)
	}
	return nil
}

// nebulaMatches checks that a Nebula host certificate certifies what raft
// records for n: its Nebula key, name and overlay IP, and its IPv6 overlay
// IP when the certificate is dual-stack (a v1 certificate from the IPv4-only
// CA a v2 move rotates away from holds none).
func nebulaMatches(certPEM []byte, c state.Cluster, n state.Node) error {
	var ip6 netip.Prefix
	if nets, _, err := pki.NebulaCertNetworks(certPEM); err == nil && len(nets) > 1 {
		ip6 = c.Overlay6Prefix(n)
	}
	return pki.NebulaCertFor(certPEM, n.NebulaPublicKey, n.Name, netip.PrefixFrom(n.OverlayIP, c.Overlay.Bits()), ip6)
}
