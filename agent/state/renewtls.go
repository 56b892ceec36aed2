package state

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
)

// RenewTLS records a node's new TLS leaf, signed by the CA holder for the
// public key raft records for the node. The leaf it replaces becomes the
// previous one (still accepted while the node switches); the one before
// that is retired (revoked with the node on removal).
type RenewTLS struct {
	NodeID      string    `json:"node_id"`
	Cert        []byte    `json:"cert"`       // PEM
	PublicKey   []byte    `json:"public_key"` // PKIX DER the leaf certifies
	Fingerprint string    `json:"fingerprint"`
	Expires     time.Time `json:"expires"`
	At          time.Time `json:"at"`
	Actor       string    `json:"actor,omitempty"`
}

func (RenewTLS) commandType() cmdType { return typeRenewTLS }

func (c RenewTLS) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", c.NodeID))
	}
	if n.State != NodeActive {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s is %s; only an active node's TLS leaf is renewed", n.Name, n.State))
	}
	if len(c.Cert) == 0 || c.Fingerprint == "" || len(c.PublicKey) == 0 || c.Expires.IsZero() {
		return codes.Wrap(codes.BadRequest, errors.New("TLS renewal needs a certificate, its public key, fingerprint and expiry"))
	}
	if len(n.TLSPublicKey) > 0 && !bytes.Equal(n.TLSPublicKey, c.PublicKey) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: the renewed leaf certifies another key than the one on record", n.Name))
	}
	if c.Fingerprint == n.TLSFingerprint || c.Fingerprint == n.PrevTLSFingerprint {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: the leaf is already on record", n.Name))
	}
	if !c.Expires.After(n.TLSExpires) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: the new leaf expires no later than the current one", n.Name))
	}

	if n.PrevTLSFingerprint != "" {
		n.Retired = append(n.Retired, n.PrevTLSFingerprint)
	}
	n.PrevTLSFingerprint = n.TLSFingerprint
	n.TLSCert, n.TLSPublicKey = bytes.Clone(c.Cert), bytes.Clone(c.PublicKey)
	n.TLSFingerprint, n.TLSExpires, n.Updated = c.Fingerprint, c.Expires, c.At
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: codes.EventTLSRenewed, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s, expires %s", n.ID, c.Expires.UTC().Format(time.RFC3339))})
	return nil
}
