package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Stock Nebula members (issue 35): the token a control node mints for
// one (`admit NAME --nebula-only [--renew]`), the ledger's answers the
// enroll server needs to serve its bundle request (enroll.NebulaLedger),
// and the CA holder's renewal of its certificate with a renewal token.

// DefaultNebulaMemberLifetime is how long a stock Nebula member's
// certificate lives unless its token says otherwise: it has no meshd to
// renew it, so expiry is the backstop that cuts off a device nobody renews
// or removes.
const DefaultNebulaMemberLifetime = 30 * 24 * time.Hour

// admitNebula mints a stock Nebula member's token: a first one for a name
// no active node holds (a former node's record is reused), or with
// req.Renew a renewal token for an active member.
func (p *Plane) admitNebula(ctx context.Context, req apitype.AdmitRequest, actor string) (*apitype.AdmitResponse, error) {
	if err := enroll.ValidName(req.Name); err != nil {
		return nil, err
	}
	switch {
	case req.Role != "" && req.Role != string(pki.RoleNebula) && req.Role != string(pki.RoleWorker):
		return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("--nebula-only admits a stock Nebula member, not a %s node", req.Role))
	case req.Approve || req.Ephemeral || req.Reusable:
		return nil, codes.Wrap(codes.BadRequest, errors.New("--nebula-only takes no --approve, --ephemeral or --reusable"))
	case req.Renew && len(req.Groups) > 0:
		return nil, codes.Wrap(codes.BadRequest, errors.New("a renewal keeps the member's groups: --group is for a first token"))
	case req.CertLifetime != 0 && (req.CertLifetime < state.MinNebulaCertLifetime || req.CertLifetime > state.MaxNebulaCertLifetime):
		return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("--cert-lifetime %s: want %s to %s", req.CertLifetime, state.MinNebulaCertLifetime, state.MaxNebulaCertLifetime))
	}
	ttl, err := p.tokenOptions(&req)
	if err != nil {
		return nil, err
	}
	n, held := p.raft.FSM().NodeByName(req.Name)
	switch {
	case req.Renew && (!held || n.Role != pki.RoleNebula || n.State != state.NodeActive):
		return nil, codes.Wrap(codes.NebulaRenewRefused, fmt.Errorf("%s is no active stock Nebula member to renew", req.Name))
	case !req.Renew && held:
		return nil, codes.Wrap(codes.NameTaken, fmt.Errorf("node %q exists (%s %s); a stock Nebula member's certificate is renewed with --renew", req.Name, n.State, n.Role))
	}
	if h, taken := p.raft.FSM().NameHolder(req.Name, p.now()); taken && !req.Renew {
		return nil, nameHeld(req.Name, h)
	}
	reuses := ""
	if f, ok := p.raft.FSM().FormerNode(req.Name); ok && !req.Renew {
		reuses = fmt.Sprintf("%s is a former node (%s); the bundle reuses the record: node id %s and overlay IP %s are kept "+
			"(every earlier certificate of it stays revoked)", f.Name, f.State, f.ID, f.OverlayIP)
	}
	rec := enroll.TokenRecord{Name: req.Name, Role: pki.RoleNebula, Addr: req.Addr, MintedBy: p.cfg.NodeID,
		Groups: req.Groups, Renew: req.Renew, CertLifetime: req.CertLifetime}
	m, err := p.mint(ctx, rec, ttl, actor)
	if err != nil {
		return nil, err
	}
	rec = m.rec
	p.log.Info("stock Nebula member's token minted", "code", codes.EventTokenMinted, "token_id", rec.Hash.String()[:12],
		"name", req.Name, "renew", req.Renew, "expires", rec.Expires, "cert_lifetime", cmp.Or(req.CertLifetime, DefaultNebulaMemberLifetime),
		"groups", strings.Join(req.Groups, ","), "actor", actor)
	command := "meshctl nebula-bundle --token-file FILE --generate --out DIR"
	if req.Renew {
		command = "meshctl nebula-bundle --token-file FILE --renew --pubkey host.pub --out DIR"
	}
	groups := req.Groups
	if req.Renew {
		groups = n.Groups
	}
	return &apitype.AdmitResponse{
		Token: m.text, ID: rec.Hash.String()[:12], Name: req.Name, Role: string(pki.RoleNebula), Expires: rec.Expires,
		Command: command, Reuses: reuses, Groups: groups, Seeds: m.seeds,
		NebulaOnly: true, Renew: req.Renew, CertLifetime: cmp.Or(req.CertLifetime, DefaultNebulaMemberLifetime),
	}, nil
}

// nebulaMemberLifetime is the lifetime of the certificate the token h
// (which admitted or renews a stock Nebula member) asks for.
func (p *Plane) nebulaMemberLifetime(h enroll.TokenHash) time.Duration {
	if rec, ok := p.raft.FSM().Token(h); ok && rec.CertLifetime > 0 {
		return rec.CertLifetime
	}
	return DefaultNebulaMemberLifetime
}

var _ enroll.NebulaLedger = (*Ledger)(nil)

// NebulaFacts are what every bundle carries: the CA bundles, the
// lighthouses (every active control node's overlay addresses and Nebula
// endpoint) and the relays (every control node, every node that offers to
// relay).
func (l *Ledger) NebulaFacts(context.Context) (enroll.NebulaFacts, error) {
	c, ok := l.p.raft.FSM().Cluster()
	if !ok {
		return enroll.NebulaFacts{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	f := enroll.NebulaFacts{ClusterID: c.ID, ClusterName: c.Name, CACert: c.TrustBundle(), NebulaCACert: c.NebulaTrustBundle()}
	for _, n := range l.p.raft.FSM().Nodes() {
		if n.State != state.NodeActive || n.Role == pki.RoleNebula {
			continue
		}
		if n.Role == pki.RoleControl && n.NebulaPort != 0 {
			f.Lighthouses = append(f.Lighthouses, enroll.NebulaHost{Name: n.Name, Overlay: n.OverlayIP, Overlay6: n.OverlayIP6,
				Underlay: []string{net.JoinHostPort(n.Underlay, strconv.Itoa(n.NebulaPort))}})
		}
		if n.Role == pki.RoleControl || n.Relay {
			f.Relays = append(f.Relays, n.OverlayIP)
		}
	}
	if len(f.Lighthouses) == 0 {
		return enroll.NebulaFacts{}, codes.Wrap(codes.Internal, errors.New("no active control node has a Nebula endpoint on record"))
	}
	slices.SortFunc(f.Lighthouses, func(a, b enroll.NebulaHost) int { return a.Overlay.Compare(b.Overlay) })
	slices.SortFunc(f.Relays, netip.Addr.Compare)
	return f, nil
}

// NebulaKeyHolder is the node, not a former one, whose record holds pub,
// after a read index.
func (l *Ledger) NebulaKeyHolder(ctx context.Context, pub []byte, _ string) (string, bool, error) {
	if err := l.p.SyncRead(ctx); err != nil {
		return "", false, err
	}
	holder, held := state.NebulaKeyHolder(l.p.raft.FSM().Nodes(), pub)
	return holder, held, nil
}

// NebulaMember is the record of the stock Nebula member named name, after
// a read index.
func (l *Ledger) NebulaMember(ctx context.Context, name string) (enroll.NebulaMember, bool, error) {
	if err := l.p.SyncRead(ctx); err != nil {
		return enroll.NebulaMember{}, false, err
	}
	n, ok := l.p.raft.FSM().NodeByName(name)
	c, cok := l.p.raft.FSM().Cluster()
	if !ok || !cok || n.Role != pki.RoleNebula {
		return enroll.NebulaMember{}, false, nil
	}
	return enroll.NebulaMember{NodeID: n.ID, Name: n.Name, Active: n.State == state.NodeActive, PublicKey: n.NebulaPublicKey,
		OverlayIP: netip.PrefixFrom(n.OverlayIP, c.Overlay.Bits()), OverlayIP6: c.Overlay6Prefix(n),
		Groups: pki.NebulaGroups(n.Role, n.Groups)[1:], Cert: n.NebulaCert, Expires: n.NebulaExpires}, true, nil
}

// RenewNebulaMember has the CA holder (this node, or the one raft names,
// over mTLS) renew the member's certificate with the renewal token h.
func (l *Ledger) RenewNebulaMember(ctx context.Context, h enroll.TokenHash, nodeID string) ([]byte, error) {
	return l.p.Signer().SignNebula(ctx, enroll.SignRequest{NodeID: nodeID, Role: pki.RoleNebula, Renewal: h})
}

// renewNebulaMember is the CA holder's side of a renewal: after a read
// index it checks the renewal token against the member's record (the FSM
// checks again as it applies), signs for the recorded key and overlay IP
// with the token's lifetime, and writes RenewNebulaMember, which records
// the certificate and spends the token in one entry.
func (p *Plane) renewNebulaMember(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	if err := p.SyncRead(ctx); err != nil {
		return nil, err
	}
	ca, err := p.signingCA()
	if err != nil {
		return nil, err
	}
	c, ok := p.raft.FSM().Cluster()
	n, nok := p.raft.FSM().Node(req.NodeID)
	if !ok || !nok {
		return nil, refuse(req, "raft records no such stock Nebula member")
	}
	rec, found := p.raft.FSM().Token(req.Renewal)
	now := p.clusterNow()
	if err := state.CheckRenewalToken(rec, found, n, now); err != nil {
		return nil, err
	}
	certPEM, err := ca.SignNebula(pki.NebulaRequest{PublicKey: n.NebulaPublicKey, Name: n.Name,
		IP: netip.PrefixFrom(n.OverlayIP, c.Overlay.Bits()), IP6: p.overlay6For(ca, n), Groups: pki.NebulaGroups(n.Role, n.Groups),
		Lifetime: p.nebulaMemberLifetime(req.Renewal)}, now)
	if err != nil {
		return nil, err
	}
	fp, expires, err := pki.NebulaCertInfo(certPEM)
	if err != nil {
		return nil, err
	}
	if err := p.WriteApplied(ctx, &state.RenewNebulaMember{Token: req.Renewal, NodeID: n.ID, Cert: certPEM, Fingerprint: fp,
		Issued: now, Expires: expires, At: now, Actor: p.self()}); err != nil {
		return nil, err
	}
	p.log.Info("stock Nebula member's certificate renewed", "code", codes.EventNebulaMemberRenewed, "node", n.Name, "expires", expires)
	return certPEM, nil
}
