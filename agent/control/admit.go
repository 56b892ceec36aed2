package control

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Admit mints a one-time join token for one node name in one role. The
// ledger keeps only the secret's hash; the token itself is returned once.
func (p *Plane) Admit(ctx context.Context, req apitype.AdmitRequest, actor string) (*apitype.AdmitResponse, error) {
	// Local state is enough here: the name check below only spares the
	// operator a token that cannot work; the admission's compare-and-set in
	// raft is what decides. (A read index would cost a follower a commit
	// round, ~50 ms.)
	if err := p.CaughtUp(ctx); err != nil {
		return nil, err
	}
	if err := enroll.ValidName(req.Name); err != nil {
		return nil, err
	}
	if req.Role == "" {
		req.Role = string(pki.RoleWorker)
	}
	role, err := pki.ParseRole(req.Role)
	if err != nil {
		return nil, err
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = enroll.DefaultTTL
	}
	if err := enroll.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if err := pki.CheckNodeGroups(req.Groups); err != nil {
		return nil, err
	}
	if req.Addr != "" {
		ip, err := netip.ParseAddr(req.Addr)
		if err != nil {
			return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("--addr %q is not an IP address", req.Addr))
		}
		req.Addr = ip.Unmap().String()
	}
	if n, taken := p.raft.FSM().NodeByName(req.Name); taken {
		return nil, codes.Wrap(codes.NameTaken, fmt.Errorf("node %q exists (%s)", req.Name, n.State))
	}
	reuses := ""
	if n, ok := p.raft.FSM().FormerNode(req.Name); ok {
		reuses = fmt.Sprintf("%s is a former node (%s); its join reuses the record: node id %s and overlay IP %s are kept, "+
			"with new keys (every earlier certificate of it is revoked)", n.Name, n.State, n.ID, n.OverlayIP)
	}
	cluster, ok := p.raft.FSM().Cluster()
	if !ok {
		return nil, codes.Wrap(codes.NotInCluster, fmt.Errorf("no cluster record in raft yet"))
	}
	caFP, err := pki.ParseFingerprint(cluster.CAFingerprint)
	if err != nil {
		return nil, fmt.Errorf("cluster CA fingerprint: %w", err)
	}
	secret, err := enroll.NewSecret()
	if err != nil {
		return nil, err
	}
	now := p.now().UTC().Truncate(time.Second)
	rec := enroll.TokenRecord{
		Hash: secret.Hash(), Name: req.Name, Role: role, Addr: req.Addr,
		Created: now, Expires: now.Add(ttl), MintedBy: p.cfg.NodeID, Approve: req.Approve,
		Groups: req.Groups,
	}
	tok := enroll.Token{ClusterID: cluster.ID, CA: caFP, Seeds: p.Seeds(), Name: req.Name,
		Role: role, Expires: rec.Expires, Secret: secret}
	if r := cluster.Rotation; r != nil { // a CA rotation: the token pins both CAs
		if tok.NextCA, err = pki.ParseFingerprint(r.NextCAFingerprint); err != nil {
			return nil, fmt.Errorf("next CA fingerprint: %w", err)
		}
	}
	text, err := tok.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode token: %w", err)
	}
	if err := p.Write(ctx, &state.MintToken{Record: rec, Actor: actor}); err != nil {
		return nil, err
	}
	p.log.Info("join token minted", "code", codes.EventTokenMinted, "token_id", rec.Hash.String()[:12],
		"name", req.Name, "role", role, "expires", rec.Expires, "addr", req.Addr, "approve", req.Approve, "groups", strings.Join(req.Groups, ","), "actor", actor)
	return &apitype.AdmitResponse{
		Token: text, ID: rec.Hash.String()[:12], Name: req.Name, Role: string(role),
		Expires: rec.Expires, Command: "meshctl join " + text, Reuses: reuses, Approve: req.Approve, Groups: req.Groups,
	}, nil
}

// Seeds are the enroll endpoints of every active control node.
func (p *Plane) Seeds() []string {
	var out []string
	for _, n := range p.raft.FSM().Nodes() {
		if n.Role == pki.RoleControl && n.State == state.NodeActive && n.EnrollAddr != "" {
			out = append(out, n.EnrollAddr)
		}
	}
	return out
}
