package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// DefaultTokenRetention is how long used, expired and revoked token
// records stay in raft before the leader prunes them.
const DefaultTokenRetention = 24 * time.Hour

// Token ids: `meshctl tokens` shows the first idLen hex characters of a
// token's hash; revoke takes that, any unique prefix of at least minIDLen,
// or the whole hash.
const (
	idLen    = 12
	minIDLen = 8
)

// tokenID is a token's id as `meshctl tokens` shows it.
func tokenID(h enroll.TokenHash) string { return h.String()[:idLen] }

// TokenRow is a token's record as `meshctl tokens` shows it at now: its
// state is revoked, used, expired or unused, in that order of precedence.
func TokenRow(t enroll.TokenRecord, now time.Time) apitype.Token {
	st := apitype.TokenUnused
	switch {
	case t.Revoked():
		st = apitype.TokenRevoked
	case t.Consumed():
		st = apitype.TokenUsed
	case t.Exhausted():
		st = apitype.TokenExhausted
	case !now.Before(t.Expires):
		st = apitype.TokenExpired
	}
	row := apitype.Token{ID: tokenID(t.Hash), Name: t.Name, Role: string(t.Role), Addr: t.Addr,
		Created: t.Created, Expires: t.Expires, MintedBy: t.MintedBy, State: st, ConsumedBy: t.ConsumedBy,
		RevokedAt: t.RevokedAt, Approval: approvalRow(t), Ephemeral: t.Ephemeral}
	if t.IsKey() {
		row.Key = &apitype.TokenKey{Uses: t.Key.Uses, Used: t.Key.Used, Left: t.Key.Uses - t.Key.Used,
			NamePrefix: t.Key.NamePrefix, NameFromHost: t.Key.NameFromHost, LastUsed: t.Key.LastUsed}
	}
	return row
}

// RevokeToken revokes the unused token whose id (or unique id prefix of at
// least 8 hex characters, or whole hash) is id, through raft, from any
// control node: a join with it then fails with codes.TokenRevoked. A used
// token is refused with codes.TokenConsumed; one revoked already is
// answered as it is, with AlreadyRevoked set. An id that is malformed or
// matches several tokens is codes.BadRequest; one that matches none,
// codes.TokenUnknown.
func (p *Plane) RevokeToken(ctx context.Context, id, actor string) (*apitype.RevokeResponse, error) {
	// A read index: a token minted on another control node a moment ago
	// must be found here.
	if err := p.SyncRead(ctx); err != nil {
		return nil, err
	}
	rec, err := p.findToken(id)
	if err != nil {
		return nil, err
	}
	switch {
	case rec.Consumed():
		return nil, codes.Wrap(codes.TokenConsumed, fmt.Errorf("token %s admitted %s at %s and cannot be revoked; to take the node out run `meshctl remove %s`",
			tokenID(rec.Hash), rec.Name, rec.ConsumedAt.UTC().Format(time.RFC3339), rec.Name))
	case rec.Revoked():
		return &apitype.RevokeResponse{Token: TokenRow(rec, p.now()), AlreadyRevoked: true}, nil
	}
	now := p.now().UTC()
	if err := p.Write(ctx, &state.RevokeToken{Hash: rec.Hash, At: now, Actor: actor}); err != nil {
		return nil, err
	}
	p.log.Info("join token revoked", "code", codes.TokenRevoked, "token_id", tokenID(rec.Hash),
		"name", rec.Name, "role", rec.Role, "actor", actor)
	// On a follower the write was applied on the leader: read it back once
	// this node has caught up, so the answer is what raft holds (the first
	// revocation, should another have raced this one).
	rec.RevokedAt, rec.RevokedBy = now, actor
	if err := p.SyncRead(ctx); err == nil {
		if got, ok := p.raft.FSM().Token(rec.Hash); ok {
			rec = got
		}
	}
	return &apitype.RevokeResponse{Token: TokenRow(rec, p.now())}, nil
}

// findToken resolves a token id, a unique prefix of one, or a whole hash.
func (p *Plane) findToken(id string) (enroll.TokenRecord, error) {
	id = strings.ToLower(strings.TrimSpace(id))
	if len(id) < minIDLen || len(id) > 2*len(enroll.TokenHash{}) || strings.Trim(id, "0123456789abcdef") != "" {
		// Not echoed: it may be a whole token pasted by mistake.
		return enroll.TokenRecord{}, codes.Wrap(codes.BadRequest,
			fmt.Errorf("token id: want %d to %d hex characters of an id `meshctl tokens` shows", minIDLen, 2*len(enroll.TokenHash{})))
	}
	var found []enroll.TokenRecord
	for _, r := range p.raft.FSM().Tokens() {
		if strings.HasPrefix(r.Hash.String(), id) {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return enroll.TokenRecord{}, codes.Wrap(codes.TokenUnknown,
			fmt.Errorf("no token with id %s; `meshctl tokens` lists them (used, expired and revoked ones are pruned after token_retention)", id))
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, r := range found {
		ids[i] = tokenID(r.Hash)
	}
	return enroll.TokenRecord{}, codes.Wrap(codes.BadRequest,
		fmt.Errorf("token id %s is ambiguous: it begins %d tokens (%s); give more of it", id, len(found), strings.Join(ids, ", ")))
}

// PruneTokens runs on the raft leader (on every other node it does
// nothing): it removes the token records that stopped admitting anyone
// (used, revoked or expired; state.Ended) more than the retention ago,
// with ONE raft entry so that every FSM removes the same ones. It writes
// nothing when there is nothing to remove, and returns how many records
// the entry removed.
func (p *Plane) PruneTokens(ctx context.Context) (int, error) {
	if !p.raft.LeaderReady() { // its FSM holds every entry before its term (raftnode/ready.go)
		return 0, nil
	}
	now := p.now().UTC()
	before := now.Add(-p.cfg.TokenRetention)
	n := p.raft.FSM().PrunableJTIs(before) // JWTs that can admit nobody again
	for _, r := range p.raft.FSM().Tokens() {
		if state.Prunable(r, before) {
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	err := p.Write(ctx, &state.PruneTokens{Before: before, At: now, Actor: p.self()})
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			p.log.Warn("pruning token records failed", "code", codes.OrInternal(err), "err", err)
		}
		return 0, err
	}
	p.log.Info("token records pruned", "count", n, "before", before)
	return n, nil
}
