package state

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// A stock Nebula member (issue 35, role nebula) is a record like any
// node's: Admit records it joining with its Nebula public key and no TLS
// key, picks its overlay IP, and consumes its token; RecordCerts records
// its one certificate and makes it active at once (it runs no meshd to
// confirm its join). Removal revokes its certificates like any node's.
// RenewNebulaMember renews its certificate with a renewal token; nothing
// renews it otherwise (the CA holder's renewal loop leaves it alone).

// checkNebulaJoining checks the admission of a stock Nebula member: a
// Nebula X25519 public key, no TLS key, no certificate yet.
func checkNebulaJoining(name string, a enroll.Admission, n *Node) error {
	if len(a.TLSPublicKey) > 0 || len(n.TLSPublicKey) > 0 {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: a stock Nebula member has no TLS key", name))
	}
	pub := a.NebulaPub
	if len(pub) == 0 {
		pub = n.NebulaPublicKey
	}
	if _, err := enroll.NebulaPublicKey(pub); err != nil {
		return err
	}
	if len(n.TLSCert) > 0 || len(n.NebulaCert) > 0 || n.State != "" && n.State != NodeJoining {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: a joining node has no certificates and no other state", name))
	}
	return nil
}

// nebulaKeyFree refuses (codes.NebulaKeyInUse) a stock Nebula member's
// key that the record of another node holds; the record the admission
// reuses (reusedID) and other former nodes do not count.
func (s *Snapshot) nebulaKeyFree(name string, pub []byte, reusedID string) error {
	if _, err := enroll.NebulaPublicKey(pub); err != nil {
		return err
	}
	for _, n := range s.Nodes {
		if n.ID != reusedID && !n.State.Former() && sameKey(n.NebulaPublicKey, pub) {
			return codes.Wrap(codes.NebulaKeyInUse, fmt.Errorf("admit %s: node %s holds this Nebula public key", name, n.Name))
		}
	}
	return nil
}

// NebulaKeyHolder is the name of a node of nodes, not a former one,
// whose record holds the Nebula public key pub (PEM). A former node's key
// is free: its certificates are revoked, and the record of a former node
// of the same name is the one an admission reuses.
func NebulaKeyHolder(nodes []Node, pub []byte) (string, bool) {
	for _, n := range nodes {
		if !n.State.Former() && sameKey(n.NebulaPublicKey, pub) {
			return n.Name, true
		}
	}
	return "", false
}

// sameKey reports whether two PEM Nebula public keys are the same key.
func sameKey(a, b []byte) bool {
	ka, errA := enroll.NebulaPublicKey(a)
	kb, errB := enroll.NebulaPublicKey(b)
	return errA == nil && errB == nil && bytes.Equal(ka, kb)
}

// RenewNebulaMember records a stock Nebula member's new certificate,
// signed by the CA holder for the key and overlay IP its record holds,
// and spends the renewal token that asked for it, in one entry: a
// compare-and-set that only an unused, unrevoked, unexpired renewal token
// naming an active member passes. The previous certificate is retired
// (valid until it ages out, revoked with the member).
type RenewNebulaMember struct {
	Token       enroll.TokenHash `json:"token"`
	NodeID      string           `json:"node_id"`
	Cert        []byte           `json:"cert"` // PEM
	Fingerprint string           `json:"fingerprint"`
	Issued      time.Time        `json:"issued"`
	Expires     time.Time        `json:"expires"`
	At          time.Time        `json:"at"`
	Actor       string           `json:"actor,omitempty"`
}

func (RenewNebulaMember) commandType() cmdType { return typeRenewNebulaMember }

func (c RenewNebulaMember) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("renew: no node with id %q", c.NodeID))
	}
	if err := CheckRenewalToken(s.Tokens[c.Token], s.Tokens[c.Token].Hash == c.Token, n, c.At); err != nil {
		return err
	}
	if len(c.Cert) == 0 || c.Fingerprint == "" || !c.Expires.After(c.Issued) {
		return codes.Wrap(codes.BadRequest, errors.New("renewal needs a certificate, its fingerprint and a validity period"))
	}
	rec := s.Tokens[c.Token]
	rec.ConsumedAt, rec.ConsumedBy = c.At, n.ID
	s.Tokens[c.Token] = rec
	if old := n.NebulaFingerprint; old != "" && old != c.Fingerprint && !slices.Contains(n.Retired, old) {
		n.Retired = append(slices.Clip(n.Retired), old)
	}
	n.NebulaCert = bytes.Clone(c.Cert)
	n.NebulaFingerprint, n.NebulaIssued, n.NebulaExpires, n.Updated = c.Fingerprint, c.Issued, c.Expires, c.At
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: codes.EventNebulaMemberRenewed, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s, expires %s, renewal token %s", n.ID, c.Expires.UTC().Format(time.RFC3339), shortHash(c.Token))})
	return nil
}

// CheckRenewalToken checks that rec (found: the ledger holds it) is a
// renewal token that may renew the certificate of n at at: role nebula and
// renew, unused, unrevoked, unexpired, naming n, an active stock Nebula
// member. The CA holder checks it before it signs; the FSM again as it
// applies.
func CheckRenewalToken(rec enroll.TokenRecord, found bool, n Node, at time.Time) error {
	switch {
	case !found:
		return codes.Wrap(codes.TokenUnknown, errors.New("renew: no record of the renewal token"))
	case rec.Role != pki.RoleNebula || !rec.Renew:
		return codes.Wrap(codes.NotNebulaToken, fmt.Errorf("renew: token %s is no renewal token", shortHash(rec.Hash)))
	case rec.Consumed():
		return codes.Wrap(codes.TokenConsumed, fmt.Errorf("renew %s: the renewal token was used at %s", rec.Name, rec.ConsumedAt.UTC().Format(time.RFC3339)))
	case rec.Revoked():
		return codes.Wrap(codes.TokenRevoked, fmt.Errorf("renew %s: the renewal token was revoked", rec.Name))
	case !at.Before(rec.Expires):
		return codes.Wrap(codes.TokenExpired, fmt.Errorf("renew %s: the renewal token expired at %s", rec.Name, rec.Expires.UTC().Format(time.RFC3339)))
	case rec.Name != n.Name || n.Role != pki.RoleNebula || n.State != NodeActive:
		return codes.Wrap(codes.NebulaRenewRefused, fmt.Errorf("renew %s: node %s is a %s %s node", rec.Name, n.Name, n.State, n.Role))
	}
	return nil
}

// MaxNebulaCertLifetime bounds a stock Nebula member's certificate
// lifetime (a token's CertLifetime): a device that never renews is cut off
// by expiry within it.
const MaxNebulaCertLifetime = 366 * 24 * time.Hour

// MinNebulaCertLifetime is the shortest: long enough for a device to be
// configured and reach the cluster.
const MinNebulaCertLifetime = 30 * time.Second

// checkNebulaToken checks a stock Nebula member's token as it is minted:
// no key, approval or ephemeral; a lifetime in bounds; a renewal token
// names an active member, a first token a name no active node holds.
func (s *Snapshot) checkNebulaToken(r enroll.TokenRecord) error {
	bad := func(format string, a ...any) error {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("mint token: "+format, a...))
	}
	switch {
	case r.IsKey():
		return bad("a reusable key admits meshd workers, not stock Nebula members")
	case r.Approve:
		return bad("a stock Nebula member's token takes no approval: the device shows no code")
	case r.Ephemeral:
		return bad("a stock Nebula member is not ephemeral: it runs no gossip to be seen down")
	case r.CertLifetime != 0 && (r.CertLifetime < MinNebulaCertLifetime || r.CertLifetime > MaxNebulaCertLifetime):
		return bad("certificate lifetime %s: want %s to %s", r.CertLifetime, MinNebulaCertLifetime, MaxNebulaCertLifetime)
	}
	n, held := s.nodeByName(r.Name)
	if r.Renew && (!held || n.Role != pki.RoleNebula || n.State != NodeActive) {
		return codes.Wrap(codes.NebulaRenewRefused, fmt.Errorf("mint token: %s is no active stock Nebula member to renew", r.Name))
	}
	return nil
}
