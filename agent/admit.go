package agent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Admit mints a one-time join token for one node name in one role. The
// ledger keeps only the secret's hash; the token itself is returned once.
func (a *Agent) Admit(ctx context.Context, req apitype.AdmitRequest, actor string) (*apitype.AdmitResponse, error) {
	rt, err := a.running()
	if err != nil {
		return nil, err
	}
	if rt.raft == nil {
		return nil, codes.Wrap(codes.NotControl, fmt.Errorf("%s is a %s node", rt.facts.Name, rt.facts.Role))
	}
	// Local state is enough here: the name check below only spares the
	// operator a token that cannot work; the admission's compare-and-set in
	// raft is what decides. (A read index would cost a follower a commit
	// round, ~50 ms.)
	if err := rt.caughtUp(ctx); err != nil {
		return nil, err
	}
	if err := enroll.ValidName(req.Name); err != nil {
		return nil, err
	}
	role, err := pki.ParseRole(firstNonEmpty(req.Role, string(pki.RoleWorker)))
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
	if req.Addr != "" {
		ip, err := netip.ParseAddr(req.Addr)
		if err != nil {
			return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("--addr %q is not an IP address", req.Addr))
		}
		req.Addr = ip.Unmap().String()
	}
	if _, taken := rt.raft.FSM().NodeByName(req.Name); taken {
		return nil, codes.Wrap(codes.NameTaken, fmt.Errorf("node %q exists", req.Name))
	}
	cluster, ok := rt.raft.FSM().Cluster()
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
	now := a.d.Now().UTC().Truncate(time.Second)
	rec := enroll.TokenRecord{
		Hash: secret.Hash(), Name: req.Name, Role: role, Addr: req.Addr,
		Created: now, Expires: now.Add(ttl), MintedBy: rt.facts.NodeID,
	}
	tok := enroll.Token{ClusterID: cluster.ID, CA: caFP, Seeds: rt.seeds(), Name: req.Name,
		Role: role, Expires: rec.Expires, Secret: secret}
	text, err := tok.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode token: %w", err)
	}
	if err := rt.write(ctx, &state.MintToken{Record: rec, Actor: actor}); err != nil {
		return nil, err
	}
	a.log.Info("join token minted", "code", codes.EventTokenMinted, "token_id", rec.Hash.String()[:12],
		"name", req.Name, "role", role, "expires", rec.Expires, "addr", req.Addr, "actor", actor)
	return &apitype.AdmitResponse{
		Token: text, ID: rec.Hash.String()[:12], Name: req.Name, Role: string(role),
		Expires: rec.Expires, Command: "meshctl join " + text,
	}, nil
}

// seeds are the enroll endpoints of every active control node.
func (rt *runtime) seeds() []string {
	var out []string
	for _, n := range rt.raft.FSM().Nodes() {
		if n.Role == pki.RoleControl && n.State == state.NodeActive && n.EnrollAddr != "" {
			out = append(out, n.EnrollAddr)
		}
	}
	return out
}
