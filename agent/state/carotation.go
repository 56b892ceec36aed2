package state

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// CAPhase is where a CA rotation is (docs/architecture.md, "CA rotation").
type CAPhase string

// The phases of a rotation in progress. With no rotation (Cluster.Rotation
// nil) the phase is CAPhaseNone.
const (
	CAPhaseNone CAPhase = "none"
	// CAPhaseTrust: the next CA exists; every node is to trust current
	// and next; the CA holder still signs with current.
	CAPhaseTrust CAPhase = "trust"
	// CAPhaseReissue: every live member reported trusting both; the CA
	// holder signs with next, and every certificate is reissued under it.
	CAPhaseReissue CAPhase = "reissue"
)

// CARotation is a CA rotation in progress: the next CA's certificates
// (never a key; the keys stay on the CA holder, under ca/next/).
type CARotation struct {
	Phase             CAPhase   `json:"phase"`
	NextCACert        []byte    `json:"next_ca_cert"`        // PEM
	NextNebulaCACert  []byte    `json:"next_nebula_ca_cert"` // PEM
	NextCAFingerprint string    `json:"next_ca_fingerprint"` // hex SHA-256
	Started           time.Time `json:"started"`
	// Now is `ca rotate --now`: reissue every certificate at once rather
	// than as each falls due.
	Now bool `json:"now,omitempty"`
	// NextOverlay6 is the IPv6 overlay of the next Nebula CA: a
	// dual-stack cluster's own, or the one a move to v2 certificates
	// brings an IPv4-only cluster (every node has its IPv6 address from
	// the begin step on, and the finish step makes it Cluster.Overlay6).
	// Zero when the next CA is IPv4-only too.
	NextOverlay6 netip.Prefix `json:"next_overlay6,omitzero"`
}

// CAStep is one step of a CA rotation, as RotateCA names it.
type CAStep string

// The steps, in order.
const (
	CABegin   CAStep = "begin"   // none -> trust, carrying the next CA
	CAReissue CAStep = "reissue" // trust -> reissue
	CAFinish  CAStep = "finish"  // reissue -> none, next becomes current
)

// RotateCA moves a CA rotation one step. Begin carries the next CA's
// certificates (and Now); reissue and finish carry only Next, the next
// CA's fingerprint, a compare-and-set on the rotation they move. Finish is
// refused while an active or joining node's TLS leaf or Nebula cert on
// record is signed by the old CA (OldDependents).
type RotateCA struct {
	Step             CAStep `json:"step"`
	Next             string `json:"next"` // hex SHA-256 of the next CA certificate
	NextCACert       []byte `json:"next_ca_cert,omitempty"`
	NextNebulaCACert []byte `json:"next_nebula_ca_cert,omitempty"`
	Now              bool   `json:"now,omitempty"`
	// NextOverlay6 (begin only) makes the rotation a move to v2
	// certificates and a dual-stack overlay (CARotation.NextOverlay6).
	NextOverlay6 netip.Prefix `json:"next_overlay6,omitzero"`
	At           time.Time    `json:"at"`
	Actor        string       `json:"actor,omitempty"`
}

func (RotateCA) commandType() cmdType { return typeRotateCA }

// Phase is the cluster's CA rotation phase.
func (c Cluster) Phase() CAPhase {
	if c.Rotation == nil {
		return CAPhaseNone
	}
	return c.Rotation.Phase
}

// TrustBundle is the cluster CA bundle every node trusts now: the current
// CA, then the next one during a rotation.
func (c Cluster) TrustBundle() []byte {
	if c.Rotation == nil {
		return pki.Bundle(c.CACert)
	}
	return pki.Bundle(c.CACert, c.Rotation.NextCACert)
}

// NebulaTrustBundle is TrustBundle for Nebula (its pki.ca).
func (c Cluster) NebulaTrustBundle() []byte {
	if c.Rotation == nil {
		return pki.Bundle(c.NebulaCACert)
	}
	return pki.Bundle(c.NebulaCACert, c.Rotation.NextNebulaCACert)
}

// Pins are the CA fingerprints a token minted now pins: the current CA,
// and the next one during a rotation.
func (c Cluster) Pins() []string {
	if c.Rotation == nil {
		return []string{c.CAFingerprint}
	}
	return []string{c.CAFingerprint, c.Rotation.NextCAFingerprint}
}

// SigningCA is the fingerprint of the CA the CA holder signs with now:
// the next one once the rotation reached CAPhaseReissue.
func (c Cluster) SigningCA() string {
	if c.Rotation != nil && c.Rotation.Phase == CAPhaseReissue {
		return c.Rotation.NextCAFingerprint
	}
	return c.CAFingerprint
}

// SigningCACerts are the certificates (TLS, Nebula) of the CA SigningCA
// names.
func (c Cluster) SigningCACerts() (tlsCA, nebulaCA []byte) {
	if c.Rotation != nil && c.Rotation.Phase == CAPhaseReissue {
		return c.Rotation.NextCACert, c.Rotation.NextNebulaCACert
	}
	return c.CACert, c.NebulaCACert
}

// OldDependents lists what still depends on the current CA when the
// rotation would drop it: each active or joining node whose TLS leaf or
// Nebula cert on record is signed by the current (old) CA ("NAME: tls",
// "NAME: nebula"). Empty outside a rotation.
func (s *Snapshot) OldDependents() []string {
	if s.Cluster == nil || s.Cluster.Rotation == nil {
		return nil
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(s.Nodes)) {
		n := s.Nodes[id]
		if n.State != NodeActive && n.State != NodeJoining {
			continue
		}
		if pki.IssuedBy(s.Cluster.CACert, n.TLSCert) {
			out = append(out, n.Name+": tls")
		}
		if pki.NebulaIssuedBy(s.Cluster.NebulaCACert, n.NebulaCert) {
			out = append(out, n.Name+": nebula")
		}
	}
	return out
}

func (c RotateCA) applyTo(s *Snapshot) error {
	cl := s.Cluster
	if cl == nil {
		return codes.Wrap(codes.NotInCluster, errors.New("no cluster to rotate the CA of"))
	}
	bad := func(format string, args ...any) error {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("CA rotation step %s: "+format, append([]any{c.Step}, args...)...))
	}
	r := cl.Rotation
	if c.Step != CABegin && (r == nil || r.NextCAFingerprint != c.Next) {
		return bad("no rotation to CA %s in progress", pki.ShortID(c.Next))
	}
	switch c.Step {
	case CABegin:
		if r != nil {
			return bad("a rotation to CA %s is in progress (phase %s)", pki.ShortID(r.NextCAFingerprint), r.Phase)
		}
		ca, err := pki.ParseCertPEM(c.NextCACert)
		if err != nil || !ca.IsCA {
			return bad("the next CA certificate is not a CA")
		}
		if fp := pki.FingerprintOf(ca).String(); fp != c.Next || fp == cl.CAFingerprint {
			return bad("the next CA's fingerprint %s is not what the step names, or is the current CA", pki.ShortID(fp))
		}
		if _, err := pki.NebulaFingerprint(c.NextNebulaCACert); err != nil {
			return bad("the next Nebula CA: %v", err)
		}
		next6, err := s.nextOverlay6(c)
		if err != nil {
			return err
		}
		cl.Rotation = &CARotation{Phase: CAPhaseTrust, NextCACert: bytes.Clone(c.NextCACert),
			NextNebulaCACert: bytes.Clone(c.NextNebulaCACert), NextCAFingerprint: c.Next, Started: c.At, Now: c.Now,
			NextOverlay6: next6}
		s.assignOverlay6()
	case CAReissue:
		if r.Phase != CAPhaseTrust {
			return bad("the rotation is in phase %s, not %s", r.Phase, CAPhaseTrust)
		}
		r.Phase = CAPhaseReissue
	case CAFinish:
		if r.Phase != CAPhaseReissue {
			return bad("the rotation is in phase %s, not %s", r.Phase, CAPhaseReissue)
		}
		if deps := s.OldDependents(); len(deps) > 0 {
			return codes.Wrap(codes.CARotationStalled, fmt.Errorf("certificates on record still under the old CA: %v", deps))
		}
		cl.CACert, cl.NebulaCACert, cl.CAFingerprint = r.NextCACert, r.NextNebulaCACert, r.NextCAFingerprint
		cl.Overlay6 = r.NextOverlay6
		cl.Rotation, cl.CARotated = nil, c.At
	default:
		return bad("unknown step")
	}
	detail := fmt.Sprintf("step %s, next CA %s", c.Step, pki.ShortID(c.Next))
	if c.Step == CABegin && c.NextOverlay6.IsValid() && !cl.Overlay6.IsValid() {
		detail += fmt.Sprintf(", a move to v2 certificates and the IPv6 overlay %s", c.NextOverlay6)
	}
	s.audit(AuditEvent{Code: codes.EventCARotated, At: c.At, Actor: c.Actor, Detail: detail})
	return nil
}

// OldDependents is Snapshot.OldDependents of the current state.
func (f *FSM) OldDependents() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.OldDependents()
}
