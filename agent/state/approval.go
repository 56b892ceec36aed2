package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// The approval of a join (`meshctl admit --approve`, enroll/approval.go)
// lives in the token's record, so that an operator on any control node
// can approve the join a seed holds. Only hashes of codes are recorded.

// RequestApproval records that a join with the token Hash waits for an
// operator's approval on the TLS session whose code hashes to
// Pending.Code (at most enroll.ApprovalMaxPending sessions wait; the
// oldest is pushed out; the session past enroll.ApprovalMaxSessions burns
// the token, revoked too). Only an unused, unrevoked, unexpired token
// minted with --approve takes it; a session that waits already, or an
// approval that is decided, changes nothing.
type RequestApproval struct {
	Hash    enroll.TokenHash   `json:"hash"`
	Pending enroll.PendingJoin `json:"pending"`
	At      time.Time          `json:"at"`
	Actor   string             `json:"actor,omitempty"`
}

// ApproveJoin is an operator's code for the join that waits with the
// token Hash (its hash, Code). It approves the waiting session that shows
// it; a code no waiting session shows counts as wrong, and the
// enroll.ApprovalMaxWrong-th wrong code burns the token (recorded as
// revoked too). A wrong code is applied (it is counted), not refused: the
// writer reads the outcome back from the record. Refused, changing
// nothing: no join waits (codes.ApprovalNotPending), a burnt, revoked,
// used or expired token.
type ApproveJoin struct {
	Hash  enroll.TokenHash `json:"hash"`
	Code  enroll.CodeHash  `json:"code"`
	At    time.Time        `json:"at"`
	Actor string           `json:"actor,omitempty"`
}

func (RequestApproval) commandType() cmdType { return typeRequestApproval }
func (ApproveJoin) commandType() cmdType     { return typeApproveJoin }

// approvalToken is the record of the --approve token h that a command at
// at may change: known, minted with --approve, not burnt, revoked, used
// or expired.
func (s *Snapshot) approvalToken(what string, h enroll.TokenHash, at time.Time) (enroll.TokenRecord, error) {
	if s.Cluster == nil {
		return enroll.TokenRecord{}, codes.Wrap(codes.NotInCluster, fmt.Errorf("%s: no cluster yet", what))
	}
	if at.IsZero() {
		return enroll.TokenRecord{}, codes.Wrap(codes.BadRequest, fmt.Errorf("%s: no time", what))
	}
	rec, ok := s.Tokens[h]
	switch {
	case !ok:
		return rec, codes.Wrap(codes.TokenUnknown, fmt.Errorf("%s: no record of token %s", what, shortHash(h)))
	case !rec.Approve:
		return rec, codes.Wrap(codes.ApprovalNotPending, fmt.Errorf("%s: token %s for %s was minted without --approve", what, shortHash(h), rec.Name))
	case rec.Approval.IsBurnt():
		return rec, codes.Wrap(codes.ApprovalBurnt, fmt.Errorf("%s: %d wrong codes burnt token %s for %s", what, rec.Approval.Wrong, shortHash(h), rec.Name))
	case rec.Consumed():
		return rec, codes.Wrap(codes.TokenConsumed, fmt.Errorf("%s: token %s admitted %s already", what, shortHash(h), rec.Name))
	case rec.Revoked():
		return rec, codes.Wrap(codes.TokenRevoked, fmt.Errorf("%s: token %s for %s was revoked", what, shortHash(h), rec.Name))
	case !at.Before(rec.Expires):
		return rec, codes.Wrap(codes.TokenExpired, fmt.Errorf("%s: token %s for %s expired at %s", what, shortHash(h), rec.Name,
			rec.Expires.UTC().Format(time.RFC3339)))
	}
	return rec, nil
}

func (c RequestApproval) applyTo(s *Snapshot) error {
	if c.Pending.Code.IsZero() {
		return codes.Wrap(codes.BadRequest, errors.New("request approval: no code"))
	}
	rec, err := s.approvalToken("request approval", c.Hash, c.At)
	if err != nil {
		return err
	}
	a, changed := rec.Approval.WithPending(c.Pending, c.At)
	if !changed {
		return nil
	}
	ev := AuditEvent{Code: codes.EventApprovalRequested, At: c.At, Actor: c.Actor, Subject: rec.Name,
		Detail: fmt.Sprintf("token %s, join from %s via %s waits for approval", shortHash(c.Hash), c.Pending.Source, c.Pending.Via)}
	if a.IsBurnt() {
		rec.RevokedAt, rec.RevokedBy = c.At, a.BurntWhy()
		ev.Code = codes.ApprovalBurnt
		ev.Detail = fmt.Sprintf("token %s burnt: %s (the last from %s via %s)", shortHash(c.Hash), a.BurntWhy(), c.Pending.Source, c.Pending.Via)
	}
	rec.Approval = a
	s.Tokens[c.Hash] = rec
	s.audit(ev)
	return nil
}

func (c ApproveJoin) applyTo(s *Snapshot) error {
	rec, err := s.approvalToken("approve", c.Hash, c.At)
	if err != nil {
		return err
	}
	switch {
	case rec.Approval.IsApproved() && rec.Approval.Approved.Code == c.Code:
		return nil // the same approval again
	case rec.Approval.IsApproved():
		return codes.Wrap(codes.ApprovalNotPending, fmt.Errorf("approve: the join of %s from %s was approved already by %s",
			rec.Name, rec.Approval.Approved.Source, rec.Approval.ApprovedBy))
	case len(rec.Approval.Pending) == 0:
		return codes.Wrap(codes.ApprovalNotPending, fmt.Errorf("approve: no join of %s waits for approval", rec.Name))
	}
	a, outcome := rec.Approval.Try(c.Code, c.Actor, c.At)
	ev := AuditEvent{At: c.At, Actor: c.Actor, Subject: rec.Name}
	switch outcome {
	case enroll.AttemptApproved:
		ev.Code = codes.EventJoinApproved
		ev.Detail = fmt.Sprintf("token %s, the join from %s via %s", shortHash(c.Hash), a.Approved.Source, a.Approved.Via)
	case enroll.AttemptWrong:
		ev.Code = codes.EventApprovalWrong
		ev.Detail = fmt.Sprintf("token %s, wrong code %d of %d", shortHash(c.Hash), a.Wrong, enroll.ApprovalMaxWrong)
	case enroll.AttemptBurnt:
		ev.Code = codes.ApprovalBurnt
		ev.Detail = fmt.Sprintf("token %s burnt by wrong code %d of %d", shortHash(c.Hash), a.Wrong, enroll.ApprovalMaxWrong)
		rec.RevokedAt, rec.RevokedBy = c.At, fmt.Sprintf("%d wrong approval codes (the last by %s)", a.Wrong, c.Actor)
	}
	rec.Approval = a
	s.Tokens[c.Hash] = rec
	s.audit(ev)
	return nil
}
