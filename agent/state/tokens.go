package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// RevokeToken revokes an unused join token: an Admit with it then fails
// with codes.TokenRevoked. A consumed token is refused with
// codes.TokenConsumed (it admitted its node already: remove the node
// instead); revoking a revoked token again changes nothing and succeeds.
type RevokeToken struct {
	Hash  enroll.TokenHash `json:"hash"`
	At    time.Time        `json:"at"`
	Actor string           `json:"actor,omitempty"`
}

// PruneTokens removes every token record that stopped being usable before
// Before (see Prunable): used, revoked and expired ones. An unused,
// unrevoked token is removed only once it expired before Before, which
// must lie before At (the clock of the node that sent the command), so a
// token that is still usable at At is never removed.
type PruneTokens struct {
	Before time.Time `json:"before"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

func (RevokeToken) commandType() cmdType { return typeRevokeToken }
func (PruneTokens) commandType() cmdType { return typePruneTokens }

// Ended is when r stopped admitting anyone: when it was used, when it was
// revoked, or when it expired.
func Ended(r enroll.TokenRecord) time.Time {
	switch {
	case r.Consumed():
		return r.ConsumedAt
	case r.Revoked():
		return r.RevokedAt
	case r.Exhausted():
		return r.Key.LastUsed
	}
	return r.Expires
}

// Prunable reports whether PruneTokens{Before: before} removes r: it
// ended (Ended) strictly before before.
func Prunable(r enroll.TokenRecord, before time.Time) bool {
	return Ended(r).Before(before)
}

func (c RevokeToken) applyTo(s *Snapshot) error {
	if s.Cluster == nil {
		return codes.Wrap(codes.NotInCluster, errors.New("revoke token: no cluster yet"))
	}
	if c.At.IsZero() {
		return codes.Wrap(codes.BadRequest, errors.New("revoke token: no time"))
	}
	rec, ok := s.Tokens[c.Hash]
	switch {
	case !ok:
		return codes.Wrap(codes.TokenUnknown, fmt.Errorf("revoke token: no record of token %s", c.Hash))
	case rec.Consumed():
		return codes.Wrap(codes.TokenConsumed, fmt.Errorf("token %s admitted node %s at %s; remove the node instead",
			shortHash(c.Hash), rec.ConsumedBy, rec.ConsumedAt.UTC().Format(time.RFC3339)))
	case rec.Revoked():
		return nil // already revoked: the first revocation stands
	}
	rec.RevokedAt, rec.RevokedBy = c.At, c.Actor
	s.Tokens[c.Hash] = rec
	s.audit(AuditEvent{Code: codes.TokenRevoked, At: c.At, Actor: c.Actor, Subject: rec.Name,
		Detail: fmt.Sprintf("role %s, hash %s", rec.Role, rec.Hash)})
	return nil
}

func (c PruneTokens) applyTo(s *Snapshot) error {
	if c.Before.IsZero() || !c.Before.Before(c.At) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("prune tokens: cut-off %s is not before %s",
			c.Before.UTC().Format(time.RFC3339), c.At.UTC().Format(time.RFC3339)))
	}
	var pruned int
	for h, r := range s.Tokens {
		if Prunable(r, c.Before) {
			delete(s.Tokens, h)
			pruned++
		}
	}
	// A JWT that expired before the cut-off can admit nobody again: its
	// replay record goes too (not counted: it is no token).
	for k, u := range s.JTIs {
		if u.Expires.Before(c.Before) {
			delete(s.JTIs, k)
		}
	}
	if pruned > 0 {
		s.audit(AuditEvent{Code: codes.EventTokensPruned, At: c.At, Actor: c.Actor,
			Detail: fmt.Sprintf("%d token records that ended before %s", pruned, c.Before.UTC().Format(time.RFC3339))})
	}
	return nil
}

// shortHash is a token's id as `meshctl tokens` shows it.
func shortHash(h enroll.TokenHash) string { return h.String()[:12] }
