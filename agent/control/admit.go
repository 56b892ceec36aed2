package control

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
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
	if req.NebulaOnly {
		return p.admitNebula(ctx, req, actor)
	}
	if req.Renew || req.CertLifetime != 0 {
		return nil, codes.Wrap(codes.BadRequest, errors.New("--renew and --cert-lifetime are for a stock Nebula member's token: add --nebula-only"))
	}
	if req.Reusable {
		return p.admitKey(ctx, req, actor)
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
	// A clock off from the other control nodes' would stamp the token's
	// life on it: its expiry would be wrong everywhere else.
	ttl, err := p.tokenOptions(&req)
	if err != nil {
		return nil, err
	}
	if h, held := p.raft.FSM().NameHolder(req.Name, p.now()); held {
		return nil, nameHeld(req.Name, h)
	}
	reuses := ""
	if n, ok := p.raft.FSM().FormerNode(req.Name); ok {
		reuses = fmt.Sprintf("%s is a former node (%s); its join reuses the record: node id %s and overlay IP %s are kept, "+
			"with new keys (every earlier certificate of it is revoked)", n.Name, n.State, n.ID, n.OverlayIP)
	}
	rec := enroll.TokenRecord{
		Name: req.Name, Role: role, Addr: req.Addr, MintedBy: p.cfg.NodeID, Approve: req.Approve,
		Groups: req.Groups, Ephemeral: req.Ephemeral,
	}
	m, err := p.mint(ctx, rec, ttl, actor)
	if err != nil {
		return nil, err
	}
	rec = m.rec
	p.log.Info("join token minted", "code", codes.EventTokenMinted, "token_id", rec.Hash.String()[:12],
		"name", req.Name, "role", role, "expires", rec.Expires, "addr", req.Addr, "approve", req.Approve, "groups", strings.Join(req.Groups, ","),
		"ephemeral", req.Ephemeral, "actor", actor)
	return &apitype.AdmitResponse{
		Token: m.text, ID: rec.Hash.String()[:12], Name: req.Name, Role: string(role),
		Expires: rec.Expires, Command: "meshctl join " + m.text, Reuses: reuses, Approve: req.Approve, Groups: req.Groups, Seeds: m.seeds,
		Ephemeral: req.Ephemeral,
	}, nil
}

// tokenOptions checks what a one-time token's mint is given besides its
// name and role, and returns its lifetime: the clock trusted (a clock off
// from the other control nodes' would stamp the token's life on it: its
// expiry would be wrong everywhere else), the lifetime (default
// enroll.DefaultTTL), the node groups, and the bound address (req.Addr
// made canonical).
func (p *Plane) tokenOptions(req *apitype.AdmitRequest) (time.Duration, error) {
	if _, untrusted := p.hooks.Clock(); untrusted != nil {
		return 0, untrusted
	}
	ttl := cmp.Or(req.TTL, enroll.DefaultTTL)
	if err := enroll.CheckTTL(ttl); err != nil {
		return 0, err
	}
	if err := pki.CheckNodeGroups(req.Groups); err != nil {
		return 0, err
	}
	if req.Addr != "" {
		ip, err := netip.ParseAddr(req.Addr)
		if err != nil {
			return 0, codes.Wrap(codes.BadRequest, fmt.Errorf("--addr %q is not an IP address", req.Addr))
		}
		req.Addr = ip.Unmap().String()
	}
	return ttl, nil
}

// minted is a token or key mint wrote: its record as raft holds it, its
// one-line text (shown once) and its seeds.
type minted struct {
	rec   enroll.TokenRecord
	text  string
	seeds []string
}

// mint gives rec a fresh secret, its seeds (the node ids too), its
// creation and expiry (ttl from now), writes it through raft and returns
// it with the token's text, which pins the cluster CA (both CAs during a
// rotation). rec.Name is the node name, or a key's prefix when rec.Key is
// set.
func (p *Plane) mint(ctx context.Context, rec enroll.TokenRecord, ttl time.Duration, actor string) (minted, error) {
	cluster, ok := p.raft.FSM().Cluster()
	if !ok {
		return minted{}, codes.Wrap(codes.NotInCluster, fmt.Errorf("no cluster record in raft yet"))
	}
	caFP, err := pki.ParseFingerprint(cluster.CAFingerprint)
	if err != nil {
		return minted{}, fmt.Errorf("cluster CA fingerprint: %w", err)
	}
	secret, err := enroll.NewSecret()
	if err != nil {
		return minted{}, err
	}
	at := p.now().UTC()
	now := at.Truncate(time.Second)
	// Each token starts its seed list at another control node (picked by
	// its hash): a joiner stops at the first seed that answers, and when
	// every token listed the same first seed, one sick control node
	// answered every join (issue 28).
	seeds, seedIDs := p.seedNodes(spreadKey(secret.Hash()))
	rec.Hash, rec.Created, rec.Expires, rec.SeedIDs = secret.Hash(), now, now.Add(ttl), seedIDs
	name := rec.Name
	if rec.IsKey() {
		name = rec.Key.NamePrefix
	}
	tok := enroll.Token{ClusterID: cluster.ID, CA: caFP, Seeds: seeds, SeedIDs: seedIDs, Name: name,
		Role: rec.Role, Expires: rec.Expires, Secret: secret, Key: rec.IsKey(), Renew: rec.Renew}
	if r := cluster.Rotation; r != nil { // a CA rotation: the token pins both CAs
		if tok.NextCA, err = pki.ParseFingerprint(r.NextCAFingerprint); err != nil {
			return minted{}, fmt.Errorf("next CA fingerprint: %w", err)
		}
	}
	text, err := tok.Encode()
	if err != nil {
		return minted{}, fmt.Errorf("encode token: %w", err)
	}
	if err := p.WriteApplied(ctx, &state.MintToken{Record: rec, Actor: actor, At: at, Names: true}); err != nil {
		return minted{}, err
	}
	if err := p.checkSeedsStayed(ctx, rec); err != nil {
		return minted{}, err
	}
	return minted{rec: rec, text: text, seeds: seeds}, nil
}

// Seeds are the enroll endpoints of every active control node.
func (p *Plane) Seeds() []string {
	seeds, _ := p.seedNodes(0)
	return seeds
}

// spreadKey is where a token's seed list starts (seedNodes): four bytes of
// its hash, which no one can choose.
func spreadKey(h enroll.TokenHash) uint32 { return binary.BigEndian.Uint32(h[:4]) }

// seedNodes are Seeds and, in the same order, those nodes' ids: a token
// names both (enroll.Token.SeedIDs), at most enroll.MaxSeeds, starting at
// the (start modulo their number)-th in raft's order.
func (p *Plane) seedNodes(start uint32) (seeds, ids []string) {
	for _, n := range p.raft.FSM().Nodes() {
		if n.Role == pki.RoleControl && n.State == state.NodeActive && n.EnrollAddr != "" {
			seeds, ids = append(seeds, n.EnrollAddr), append(ids, n.ID)
		}
	}
	if len(seeds) == 0 {
		return nil, nil
	}
	k := int(start % uint32(len(seeds)))
	seeds, ids = rotated(seeds, k), rotated(ids, k)
	if len(seeds) > enroll.MaxSeeds {
		seeds, ids = seeds[:enroll.MaxSeeds], ids[:enroll.MaxSeeds]
	}
	return seeds, ids
}

// nameHeld is the error of a mint for a name the one name rule says is
// held (state.NameHolder): by a node, a live token or a live key.
func nameHeld(name string, h state.NameHolder) error {
	how := "remove that node first, or admit the machine under another name"
	if h.Node == "" {
		how = fmt.Sprintf("revoke it first (`meshctl tokens revoke %s`), or admit the machine under another name", h.Token.String()[:12])
	}
	return codes.Wrap(codes.NameTaken, fmt.Errorf("%q is held by %s: %s", name, h, how))
}
