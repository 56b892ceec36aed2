package enroll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// approve holds the join of the token rec (minted with --approve) until
// an operator approves this session, whose code is code ("" when the
// request came over no TLS session: refused). The first request of a
// session records it waiting and answers at once (errPending), so that
// the joiner shows its code; the joiner's next request over the same
// session waits here up to the poll bound, then is answered errPending
// again. nil means this session is approved: the admission goes on.
func (s *Server) approve(ctx context.Context, req Request, rec TokenRecord, source netip.Addr, code string) error {
	ap, ok := s.ledger.(Approvals)
	switch {
	case !ok:
		return codes.Wrap(codes.EnrollRejected, errors.New("this token needs an operator's approval, which this control node cannot hold a join for"))
	case !req.Approval:
		return codes.Wrap(codes.EnrollRejected, fmt.Errorf("the token for %s needs an operator's approval (admit --approve), "+
			"and the joining meshd cannot show an approval code: upgrade it", rec.Name))
	case code == "":
		return codes.Wrap(codes.EnrollRejected, errors.New("an approval needs the TLS session to derive its code from"))
	}
	mine := HashCode(rec.Hash, code)
	key, err := joinerKey(req.CSR)
	if err != nil {
		return err
	}
	pending := errPending{ApprovalPending{Name: rec.Name, Expires: rec.Expires}}
	if decided, err := approvalOutcome(rec, mine, key, s.now()); decided || err != nil {
		return err
	}
	if !rec.Approval.waiting(mine) {
		p := PendingJoin{Code: mine, Source: source.String(), Since: s.now().UTC(), Key: key}
		if err := ap.RequestApproval(ctx, rec.Hash, p); err != nil {
			return fmt.Errorf("record the join waiting for approval: %w", err)
		}
		s.log.Info("join waits for an operator's approval", "code", codes.EventApprovalRequested, "name", rec.Name,
			"token", shortHash(rec.Hash), "source", source)
		return pending
	}
	poll := time.NewTimer(s.cfg.ApprovalPoll)
	defer poll.Stop()
	tick := time.NewTicker(approvalTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll.C:
			return pending
		case <-tick.C:
		}
		cur, ok, err := s.ledger.Token(ctx, rec.Hash)
		if err != nil {
			return fmt.Errorf("look up token: %w", err)
		}
		if !ok {
			return codes.Wrap(codes.TokenUnknown, fmt.Errorf("no token %s in the cluster", shortHash(rec.Hash)))
		}
		if decided, err := approvalOutcome(cur, mine, key, s.now()); decided || err != nil {
			return err
		}
	}
}

// approvalTick is how often a waiting join looks at the token's record.
const approvalTick = 100 * time.Millisecond

// joinerKey is KeyHash of the TLS public key the CSR proves its sender
// holds (its signature checked).
func joinerKey(csr []byte) (string, error) {
	der, err := trust.CSRPublicKey(csr)
	if err != nil {
		return "", err
	}
	return KeyHash(der), nil
}

// KeyHash is how an approval names a joiner's TLS public key (PKIX DER,
// as Admission.TLSPublicKey holds it): its SHA-256 in hex.
func KeyHash(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// approvalOutcome judges the token rec for the session whose code hash is
// mine, of the joiner whose key is key, at now: decided with nil when an
// operator approved this session, or another session of the same joiner
// (the same key: it reconnected); an error when the join can no longer be
// approved (burnt, revoked, used, another joiner approved, expired:
// codes.ApprovalTimeout); not decided otherwise.
func approvalOutcome(rec TokenRecord, mine CodeHash, key string, now time.Time) (bool, error) {
	a := rec.Approval
	switch {
	case a.IsBurnt():
		return true, codes.Wrap(codes.ApprovalBurnt, fmt.Errorf("the token for %s was burnt at %s (%s)",
			rec.Name, a.BurntAt.UTC().Format(time.RFC3339), a.BurntWhy()))
	case rec.Revoked():
		return true, codes.Wrap(codes.TokenRevoked, fmt.Errorf("token for %s was revoked at %s", rec.Name, rec.RevokedAt.UTC().Format(time.RFC3339)))
	case rec.Consumed():
		return true, codes.Wrap(codes.TokenConsumed, fmt.Errorf("token for %s was used at %s by another join", rec.Name, rec.ConsumedAt.UTC().Format(time.RFC3339)))
	case a.IsApproved() && (a.Approved.Code == mine || (key != "" && a.Approved.Key == key)):
		return true, nil
	case a.IsApproved():
		return true, codes.Wrap(codes.TokenConsumed, fmt.Errorf("an operator (%s) approved another join with the token for %s, from %s",
			a.ApprovedBy, rec.Name, a.Approved.Source))
	case !now.Before(rec.Expires):
		return true, codes.Wrap(codes.ApprovalTimeout, fmt.Errorf("no operator approved the join of %s before its token expired at %s",
			rec.Name, rec.Expires.UTC().Format(time.RFC3339)))
	}
	return false, nil
}

// ApprovalShown is what a joiner shows while its join waits for approval.
type ApprovalShown struct {
	Name    string    `json:"name"`
	Code    string    `json:"code"` // 6 digits
	Seed    string    `json:"seed"`
	Expires time.Time `json:"expires"` // the token's: no approval by then fails the join
}

func (a ApprovalShown) String() string {
	return fmt.Sprintf("waiting for approval: code %s; on a control node run `meshctl approve %s %s` before %s",
		FormatCode(a.Code), a.Name, a.Code, a.Expires.UTC().Format(time.RFC3339))
}

// waitApproval handles a seed's "still pending" answer (data, HTTP 202)
// on session s: the first time on a session it shows the session's code;
// it ends the join with codes.ApprovalTimeout once the token has expired
// by this clock, else the caller asks again.
func (c *client) waitApproval(s *session, data []byte) error {
	var p ApprovalPending
	if err := json.Unmarshal(data, &p); err != nil {
		return codes.Wrap(codes.EnrollRejected, fmt.Errorf("seed %s: malformed approval answer: %w", s.seed, err))
	}
	if !s.shown {
		code, err := SessionCode(s.conn.ConnectionState(), c.tok.Secret.Hash())
		if err != nil {
			return codes.Wrap(codes.EnrollRejected, err)
		}
		s.shown = true
		c.approval(ApprovalShown{Name: c.tok.Name, Code: code, Seed: s.seed, Expires: c.tok.Expires})
	}
	if !c.now().Before(c.tok.Expires) {
		return codes.Wrap(codes.ApprovalTimeout, fmt.Errorf("no operator approved the join of %s before its token expired at %s",
			c.tok.Name, c.tok.Expires.UTC().Format(time.RFC3339)))
	}
	return nil
}
