package state

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
)

// RenewNebula records a node's new Nebula host certificate, signed by the
// CA holder for the node's own public key and overlay IP. The previous
// certificate is retired (Node.Retired): it stays valid until it ages out,
// and removing the node revokes it with the current one.
type RenewNebula struct {
	NodeID      string    `json:"node_id"`
	Cert        []byte    `json:"cert"` // PEM
	Fingerprint string    `json:"fingerprint"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
	// Routes are the unsafe networks the certificate holds (the node's
	// approved routes when it was signed).
	Routes []netip.Prefix `json:"routes,omitempty"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor,omitempty"`
}

func (c RenewNebula) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", c.NodeID))
	}
	if n.State.Former() {
		// A failed join too (issue 52: a former record holds no valid
		// certificate; on main a failed record took a renewal unrevoked).
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s is %s; its certificate is not renewed", n.Name, n.State))
	}
	if len(c.Cert) == 0 || c.Fingerprint == "" || !c.Expires.After(c.Issued) {
		return codes.Wrap(codes.BadRequest, errors.New("renewal needs a certificate, its fingerprint and a validity period"))
	}
	if !c.Expires.After(n.NebulaExpires) && n.NebulaFingerprint != "" {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: the new certificate expires no later than the current one", n.Name))
	}
	if old := n.NebulaFingerprint; old != "" && old != c.Fingerprint && !slices.Contains(n.Retired, old) {
		n.Retired = append(slices.Clip(n.Retired), old)
	}
	n.NebulaCert = append([]byte(nil), c.Cert...)
	n.NebulaFingerprint, n.NebulaIssued, n.NebulaExpires, n.Updated = c.Fingerprint, c.Issued, c.Expires, c.At
	s.recordCertRoutes(&n, c.Routes, c.At)
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: codes.EventCertRenewed, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s, expires %s", n.ID, c.Expires.UTC().Format(time.RFC3339))})
	return nil
}

// recordCertRoutes records that n's new current certificate holds routes.
// When it drops a prefix an earlier certificate held, every certificate
// of n that held one is revoked (the new one aside): a withdrawn route is
// carried by nobody, whatever certificate the node kept.
func (s *Snapshot) recordCertRoutes(n *Node, routes []netip.Prefix, at time.Time) {
	dropped := slices.ContainsFunc(n.NebulaRoutes, func(p netip.Prefix) bool { return !slices.Contains(routes, p) })
	held := slices.DeleteFunc(slices.Clone(n.NebulaRouted), func(fp string) bool { return fp == n.NebulaFingerprint })
	if dropped {
		for _, fp := range held {
			if !s.revoked(n.ID, fp) {
				s.Revocations = append(s.Revocations, Revocation{NodeID: n.ID, Fingerprint: fp, At: at})
			}
		}
		held = nil
	}
	if len(routes) > 0 {
		held = append(held, n.NebulaFingerprint)
	}
	n.NebulaRoutes, n.NebulaRouted = slices.Clone(routes), held
}
