package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// AbortJoin is a joiner undoing its own admission (issue 52 item 10): the
// cluster certified it, and then its join failed on its own machine
// before it confirmed (the overlay did not start, gossip did not, a port
// was taken between the join's check and its use). Only a joining record
// whose recorded TLS leaf is Leaf, the leaf the caller presented (the
// internal API's guard reads it from the handshake, never from a body),
// takes it; an active record never does (codes.JoinConfirmed), nor a
// failed or a former one.
//
// Applied, every certificate the record holds is revoked (as FailJoin
// does: a certificate signed for the attempt is never left valid), the
// gossip keys it was given are owed a rotation, and the admission is
// given back as AbortAdmission gives it back: the token is unused again
// (a key's use returned, a JWT's jti freed) for the rest of its
// lifetime, at most MaxUndone times, and an --approve token waits for a
// fresh approval (the one given was for keys whose certificates are now
// revoked). The record is
// deleted and its overlay IP freed, or, a reused record, goes back to the
// former state it was in (left, removed, failed), keeping its id and IP.
type AbortJoin struct {
	NodeID string `json:"node_id"`
	// Leaf is the SHA-256 fingerprint of the TLS leaf the caller
	// presented: the record's must be the same.
	Leaf  string    `json:"leaf"`
	Cause string    `json:"cause,omitempty"`
	At    time.Time `json:"at"`
	Actor string    `json:"actor,omitempty"`
}

func (AbortJoin) commandType() cmdType { return typeAbortJoin }

// maxAbortCause bounds the cause a joiner gives (it lands in the audit
// ring).
const maxAbortCause = 512

// MaxUndone is how many joins that failed on their joiner a one-time
// token or a JWT gives back (a key: as many as its uses, if more). Each
// undone join adds its certificates to the revocation list, which every
// member's Nebula blocks until they expire, and owes a gossip key
// rotation: without a bound, a token's holder could grow both for as long
// as the token lives. The undo past it is refused (codes.JoinUndoLimit);
// the join bound then fails the join.
const MaxUndone = 3

// jtiOf is the JWT replay record of the join by identity that admitted
// node id, if any.
func (s *Snapshot) jtiOf(id string) (string, JTIUse, bool) {
	for k, u := range s.JTIs {
		if u.NodeID == id {
			return k, u, true
		}
	}
	return "", JTIUse{}, false
}

func (c AbortJoin) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	switch {
	case c.At.IsZero():
		return codes.Wrap(codes.BadRequest, errors.New("abort join: no time"))
	case len(c.Cause) > maxAbortCause:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("abort join: a cause of %d bytes (at most %d)", len(c.Cause), maxAbortCause))
	case !ok:
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("abort join: no node with id %q", c.NodeID))
	case n.State == NodeActive:
		return codes.Wrap(codes.JoinConfirmed, fmt.Errorf("abort join: node %s is active; a confirmed join is never undone", n.Name))
	case n.State != NodeJoining:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("abort join: node %s is %s; only a join not yet confirmed can be undone", n.Name, n.State))
	case n.TLSFingerprint == "" || n.NebulaFingerprint == "":
		return codes.Wrap(codes.BadRequest, fmt.Errorf("abort join: node %s has no certificates recorded", n.Name))
	case c.Leaf != n.TLSFingerprint:
		return codes.Wrap(codes.NotMember, fmt.Errorf("abort join: the caller's leaf is not the one recorded for node %s; only the joiner undoes its own join", n.Name))
	}
	rec, hasToken := s.Tokens[n.Token]
	hasToken = hasToken && n.Token != (enroll.TokenHash{})
	jti, use, hasJTI := s.jtiOf(n.ID)
	switch {
	case hasToken && rec.Undone >= max(MaxUndone, rec.Key.Uses):
		return codes.Wrap(codes.JoinUndoLimit, fmt.Errorf("abort join: the token that admitted %s gave back %d failed joins already", n.Name, rec.Undone))
	case hasJTI && use.Undone >= MaxUndone:
		return codes.Wrap(codes.JoinUndoLimit, fmt.Errorf("abort join: the JWT that admitted %s gave back %d failed joins already", n.Name, use.Undone))
	}
	s.revoke(n, c.At)
	s.oweKeys(n.ID) // it got the gossip keys with its join response
	if hasJTI {
		// Free, and counted: the record stays (with no node) until the JWT
		// expires and PruneTokens drops it.
		s.JTIs[jti] = JTIUse{Expires: use.Expires, Undone: use.Undone + 1}
	}
	s.giveBack(n)
	if hasToken {
		rec = s.Tokens[n.Token] // as giveBack left it
		rec.Undone++
		if rec.Approve {
			rec.Approval.Approved, rec.Approval.ApprovedAt, rec.Approval.ApprovedBy = enroll.PendingJoin{}, time.Time{}, ""
			rec.Approval.Pending = nil
		}
		s.Tokens[n.Token] = rec
	}
	revoked := len(everyFingerprint(n))
	if n.Prior != "" {
		s.restorePrior(n, c.At)
	} else {
		if s.IPAM[n.OverlayIP] == n.ID {
			delete(s.IPAM, n.OverlayIP)
		}
		delete(s.Nodes, n.ID)
	}
	cause := c.Cause
	if cause == "" {
		cause = "its join failed on the joiner"
	}
	s.audit(AuditEvent{Code: codes.EventJoinAborted, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s at %s undone by the joiner (%s): %d certificates revoked; its token is unused again", n.ID, n.OverlayIP, cause, revoked)})
	return nil
}

// giveBack frees what the admission of n consumed: its token is unused
// again (a record that names its token frees that one only; an older
// record every token its id consumed), a key gets back the use it took,
// and a JWT its jti.
func (s *Snapshot) giveBack(n Node) {
	for h, rec := range s.Tokens {
		if rec.ConsumedBy == n.ID && (n.Token == enroll.TokenHash{} || n.Token == h) {
			rec.ConsumedAt, rec.ConsumedBy = time.Time{}, ""
			s.Tokens[h] = rec
		}
		if rec.IsKey() && n.Token == h && rec.Key.Used > 0 {
			rec.Key.Used--
			s.Tokens[h] = rec
		}
	}
	for k, u := range s.JTIs {
		if u.NodeID == n.ID {
			delete(s.JTIs, k)
		}
	}
}

// restorePrior puts the reused record n back to the former node it was:
// its state, without the keys, certificates and token of the admission
// that reused it (the certificates are revoked; the former node's own
// were revoked when it was reused).
func (s *Snapshot) restorePrior(n Node, at time.Time) {
	n.State, n.Prior, n.Token, n.Updated = n.Prior, "", enroll.TokenHash{}, at
	n.TLSPublicKey, n.NebulaPublicKey = nil, nil
	n.TLSCert, n.NebulaCert = nil, nil
	n.TLSFingerprint, n.PrevTLSFingerprint, n.NebulaFingerprint, n.Retired = "", "", "", nil
	n.TLSExpires, n.NebulaExpires, n.NebulaIssued = time.Time{}, time.Time{}, time.Time{}
	s.Nodes[n.ID] = n
}
