package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// admitKey mints a reusable enrolment key (issue 31): it admits up to
// req.Uses workers until req.TTL (default enroll.DefaultKeyTTL, at most
// enroll.MaxKeyTTL), each under a name the cluster gives (req.NamePrefix
// and a number, or the joiner's hostname with req.NameFromHost). The checks
// here spare the operator a key that cannot work; the FSM makes them again
// as it applies the mint (a prefix overlapping a live key's, the limits).
func (p *Plane) admitKey(ctx context.Context, req apitype.AdmitRequest, actor string) (*apitype.AdmitResponse, error) {
	switch {
	case req.Name != "":
		return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("a reusable key names no node (%q given): the cluster names each joiner --name-prefix and a number", req.Name))
	case req.Approve:
		return nil, codes.Wrap(codes.BadRequest, errors.New("a reusable key cannot wait for approval: mint one-time tokens with --approve"))
	case req.Addr != "":
		return nil, codes.Wrap(codes.BadRequest, errors.New("a reusable key cannot be bound to one address (--addr): a fleet joins from many"))
	}
	if req.Role != "" && req.Role != string(pki.RoleWorker) {
		return nil, codes.Wrap(codes.BadRole, fmt.Errorf("a reusable key admits workers, not %q: control nodes join one at a time with `meshctl admit NAME --role control`", req.Role))
	}
	if _, untrusted := p.hooks.Clock(); untrusted != nil {
		return nil, untrusted
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = enroll.DefaultKeyTTL
	}
	if err := enroll.CheckKeyLimits(req.Uses, ttl, req.NamePrefix); err != nil {
		return nil, err
	}
	if err := pki.CheckNodeGroups(req.Groups); err != nil {
		return nil, err
	}
	now := p.now()
	for _, o := range p.raft.FSM().Tokens() {
		if state.LiveKey(o, now) && enroll.PrefixesOverlap(o.Key.NamePrefix, req.NamePrefix) {
			return nil, codes.Wrap(codes.KeyPrefixTaken, fmt.Errorf("prefix %q overlaps %q of live key %s: choose another or revoke that key (`meshctl tokens revoke %s`)",
				req.NamePrefix, o.Key.NamePrefix, tokenID(o.Hash), tokenID(o.Hash)))
		}
	}
	rec := enroll.TokenRecord{
		Role: pki.RoleWorker, MintedBy: p.cfg.NodeID, Groups: req.Groups, Ephemeral: req.Ephemeral,
		Key: enroll.KeyLimits{Uses: req.Uses, NamePrefix: req.NamePrefix, NameFromHost: req.NameFromHost},
	}
	m, err := p.mint(ctx, rec, ttl, actor)
	if err != nil {
		return nil, err
	}
	rec = m.rec
	p.log.Info("enrolment key minted", "code", codes.EventTokenMinted, "token_id", tokenID(rec.Hash),
		"name_prefix", req.NamePrefix, "uses", req.Uses, "expires", rec.Expires, "name_from_host", req.NameFromHost,
		"ephemeral", req.Ephemeral, "groups", strings.Join(req.Groups, ","), "actor", actor)
	return &apitype.AdmitResponse{
		Token: m.text, ID: tokenID(rec.Hash), Role: string(rec.Role), Expires: rec.Expires,
		Command: "meshctl join " + m.text, Groups: req.Groups, Seeds: m.seeds,
		Reusable: true, Uses: req.Uses, NamePrefix: req.NamePrefix, NameFromHost: req.NameFromHost, Ephemeral: req.Ephemeral,
	}, nil
}
