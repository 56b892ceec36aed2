package enroll

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshd/meshd/codes"
)

// claim is what a joiner claims in an enroll or check request.
type claim struct {
	Secret  Secret
	Name    string
	Clock   time.Time
	Expires time.Time
	// Held: the name must be held, not free (a renewal of a stock Nebula
	// member's certificate): the name-free check is left out.
	Held bool
}

// admissible runs every check a join must pass before anything is
// written, in a fixed order: first those that need no ledger (name, a
// secret present, the expiry the joiner read from its token, the clock it
// claims), then token known, unused, not revoked, unexpired, source
// address, name equal to the token's, name free. It returns the token's
// record, and with codes.TokenConsumed the used token's record (Enroll
// then tries to resume the join that used it).
func (s *Server) admissible(ctx context.Context, c claim, source netip.Addr) (TokenRecord, error) {
	// A joiner with a reusable key names no node: the cluster gives the
	// name. Whether the secret is a key's is the ledger's to say.
	if c.Name != "" {
		if err := ValidName(c.Name); err != nil {
			return TokenRecord{}, err
		}
	}
	// Everything that needs no ledger comes first: on a follower, looking
	// up a token this node does not hold costs a round trip to the leader.
	if c.Secret.IsZero() {
		return TokenRecord{}, codes.Wrap(codes.TokenUnknown, errors.New("the request carries no token secret"))
	}
	now := s.now()
	if !c.Expires.IsZero() && !now.Before(c.Expires) {
		return TokenRecord{}, codes.Wrap(codes.TokenExpired, fmt.Errorf("token for %s expired at %s", c.Name, c.Expires.UTC().Format(time.RFC3339)))
	}
	if err := s.judgeClock(c, now); err != nil {
		return TokenRecord{}, err
	}
	hash := c.Secret.Hash()
	rec, ok, err := s.ledger.Token(ctx, hash)
	if err != nil {
		return TokenRecord{}, fmt.Errorf("look up token: %w", err)
	}
	if !ok {
		return TokenRecord{}, codes.Wrap(codes.TokenUnknown, fmt.Errorf("no token %s in the cluster", shortHash(hash)))
	}
	if rec.Consumed() {
		return rec, codes.Wrap(codes.TokenConsumed, fmt.Errorf("token for %s was used at %s", rec.Name, rec.ConsumedAt.UTC().Format(time.RFC3339)))
	}
	if rec.Approval.IsBurnt() {
		return TokenRecord{}, codes.Wrap(codes.ApprovalBurnt, fmt.Errorf("the token for %s was burnt at %s (%s)",
			rec.Name, rec.Approval.BurntAt.UTC().Format(time.RFC3339), rec.Approval.BurntWhy()))
	}
	if rec.Revoked() {
		return TokenRecord{}, codes.Wrap(codes.TokenRevoked, fmt.Errorf("token for %s was revoked at %s", rec.Name, rec.RevokedAt.UTC().Format(time.RFC3339)))
	}
	now = s.now()
	if !now.Before(rec.Expires) && len(rec.Approval.Pending) > 0 {
		return TokenRecord{}, codes.Wrap(codes.ApprovalTimeout, fmt.Errorf("no operator approved the join of %s before its token expired at %s",
			rec.Name, rec.Expires.UTC().Format(time.RFC3339)))
	}
	if !now.Before(rec.Expires) {
		return TokenRecord{}, codes.Wrap(codes.TokenExpired, fmt.Errorf("token for %s expired at %s", rec.Name, rec.Expires.UTC().Format(time.RFC3339)))
	}
	if rec.Addr != "" && !sameAddr(rec.Addr, source) {
		return TokenRecord{}, codes.Wrap(codes.TokenWrongAddr, fmt.Errorf("token for %s is bound to %s, request came from %s", rec.Name, rec.Addr, source))
	}
	if rec.IsKey() {
		// The FSM checks the uses again as it applies the admission: two
		// joins racing for the last use through two control nodes cannot
		// both pass (state.Admit).
		if rec.Exhausted() {
			return TokenRecord{}, codes.Wrap(codes.KeyExhausted, fmt.Errorf("key %s (prefix %s) has admitted %d of %d machines",
				shortHash(rec.Hash), rec.Key.NamePrefix, rec.Key.Used, rec.Key.Uses))
		}
		return rec, nil
	}
	if c.Name == "" {
		return TokenRecord{}, codes.Wrap(codes.BadNodeName, fmt.Errorf("the request names no node; the token admits %s", rec.Name))
	}
	if c.Name != rec.Name {
		return TokenRecord{}, codes.Wrap(codes.TokenNameDiffer, fmt.Errorf("token admits %s, request names %s", rec.Name, c.Name))
	}
	if c.Held {
		return rec, nil
	}
	taken, err := s.ledger.NameTaken(ctx, c.Name)
	if err != nil {
		return TokenRecord{}, fmt.Errorf("check name %s: %w", c.Name, err)
	}
	if taken {
		// A concurrent join with this very token may have taken the name
		// between the two reads: say so rather than blame the name, and
		// return the used record, so Enroll can resume it when that join
		// was this one (a node that caught up between the two reads).
		if again, ok, err := s.ledger.Token(ctx, hash); err == nil && ok && again.Consumed() {
			return again, codes.Wrap(codes.TokenConsumed, fmt.Errorf("token for %s was used at %s", again.Name, again.ConsumedAt.UTC().Format(time.RFC3339)))
		}
		return TokenRecord{}, codes.Wrap(codes.NameTaken, fmt.Errorf("a node named %s already exists", c.Name))
	}
	return rec, nil
}

// judgeClock refuses, with codes.ClockSkew, a claim whose clock differs
// from this node's by more than MaxSkew (zero disables the check), and
// logs codes.ClockSkewWarning past WarnSkew. A claim without a clock is
// not judged: every meshd joiner sends one, and its own check ran first.
func (s *Server) judgeClock(c claim, now time.Time) error {
	if s.cfg.MaxSkew <= 0 || c.Clock.IsZero() {
		return nil
	}
	sk := Skew{Peer: "joiner " + c.Name, Local: now, Remote: c.Clock}
	warn, err := sk.Judge(s.cfg.MaxSkew)
	if err != nil {
		s.log.Warn("joiner clock skew: refused", "code", codes.ClockSkew, "name", c.Name, "skew", sk.Offset().Round(time.Second))
		return codes.Wrap(codes.ClockSkew, fmt.Errorf("the joiner's clock reads %s, this seed's reads %s: %s apart, more than the %s allowed (max_clock_skew)",
			c.Clock.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), absDuration(sk.Offset()).Round(time.Second), s.cfg.MaxSkew))
	}
	if warn {
		s.log.Warn("joiner clock skew", "code", codes.ClockSkewWarning, "name", c.Name, "skew", sk.Offset().Round(time.Second))
	}
	return nil
}
