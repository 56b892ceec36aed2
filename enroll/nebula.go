package enroll

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// The PEM block types of a Nebula public key (Nebula v1.11.0 and v1.12.0 cert/pem.go).
const (
	nebulaX25519Public = "NEBULA X25519 PUBLIC KEY"
	nebulaP256Public   = "NEBULA P256 PUBLIC KEY"
	x25519KeySize      = 32
)

// NebulaPublicKey checks that pemKey is one Nebula X25519 public key, the
// curve of the cluster's Nebula CA, and returns its 32 raw bytes. A P-256
// key, another PEM block, a bad length or trailing data is
// codes.NebulaKeyCurve; the error never quotes the key.
func NebulaPublicKey(pemKey []byte) ([]byte, error) {
	blk, rest := pem.Decode(pemKey)
	switch {
	case blk == nil:
		return nil, codes.Wrap(codes.NebulaKeyCurve, errors.New("the public key is not PEM"))
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, codes.Wrap(codes.NebulaKeyCurve, errors.New("the public key file holds more than one PEM block"))
	case blk.Type == nebulaP256Public:
		return nil, codes.Wrap(codes.NebulaKeyCurve, errors.New("a P-256 Nebula key; the cluster's Nebula CA is curve 25519"))
	case blk.Type != nebulaX25519Public:
		return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("a %q PEM block, want %q", blk.Type, nebulaX25519Public))
	case len(blk.Bytes) != x25519KeySize:
		return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("an X25519 key of %d bytes, want %d", len(blk.Bytes), x25519KeySize))
	}
	return blk.Bytes, nil
}

// nebulaOnly is the refusal of a meshd join (or its plan) that brought a
// stock Nebula member's token: nothing is spent.
func nebulaOnly(rec TokenRecord) error {
	return codes.Wrap(codes.NebulaOnlyToken, fmt.Errorf("the token admits %s as a stock Nebula member: run `meshctl nebula-bundle` on the device", rec.Name))
}

// nebulaMember serves a bundle request from source with the throttle a
// join has: a stock Nebula member's first certificate (a fresh record, or
// the record of a former node of its name, reused), or with req.Renew a
// new one for the key an active member holds. Every check that can refuse
// runs before anything is written: a refused request spends nothing.
func (s *Server) nebulaMember(ctx context.Context, req NebulaRequest, source netip.Addr) (*NebulaResponse, error) {
	source = source.Unmap()
	if err := s.throttled(source); err != nil {
		return nil, err
	}
	resp, err := s.nebulaServe(ctx, req, source)
	s.count(source, err)
	return resp, err
}

func (s *Server) nebulaServe(ctx context.Context, req NebulaRequest, source netip.Addr) (*NebulaResponse, error) {
	if req.Protocol != ProtocolVersion {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll protocol %d, this node speaks %d", req.Protocol, ProtocolVersion))
	}
	if s.nebula == nil {
		return nil, codes.Wrap(codes.EnrollRejected, errors.New("this control node serves no stock Nebula members"))
	}
	if _, err := NebulaPublicKey(req.PublicKey); err != nil {
		return nil, err
	}
	rec, err := s.admissible(ctx, claim{Secret: req.Secret, Name: req.Name, Clock: req.Clock, Expires: req.Expires, Held: req.Renew}, source)
	if err != nil && rec.Consumed() && rec.Role == trust.RoleNebula && !req.Renew {
		// The request that used the token may have been this one, its
		// answer lost: the same key gets the same certificate again.
		if resp, rerr := s.nebulaResume(ctx, req, rec); resp != nil || rerr != nil {
			return resp, rerr
		}
	}
	if err != nil {
		return nil, err
	}
	switch {
	case rec.Role != trust.RoleNebula:
		return nil, codes.Wrap(codes.NotNebulaToken, fmt.Errorf("the token admits %s as a %s node, which runs meshd: join it with `meshctl join`", rec.Name, rec.Role))
	case rec.Renew && !req.Renew:
		return nil, codes.Wrap(codes.NotNebulaToken, fmt.Errorf("the token renews %s's certificate: ask with --renew", rec.Name))
	case !rec.Renew && req.Renew:
		return nil, codes.Wrap(codes.NotNebulaToken, fmt.Errorf("the token admits %s; a renewal needs a renewal token (`meshctl admit %s --nebula-only --renew`)", rec.Name, rec.Name))
	case rec.IsKey():
		return nil, codes.Wrap(codes.NotNebulaToken, errors.New("a reusable key admits meshd workers, never a stock Nebula member"))
	}
	if req.Renew {
		return s.nebulaRenew(ctx, req, rec)
	}
	if holder, held, err := s.nebula.NebulaKeyHolder(ctx, req.PublicKey, rec.Name); err != nil {
		return nil, fmt.Errorf("look up the key's holder: %w", err)
	} else if held {
		return nil, codes.Wrap(codes.NebulaKeyInUse, fmt.Errorf("node %s holds this Nebula public key", holder))
	}
	facts, err := s.nebula.NebulaFacts(ctx)
	if err != nil {
		return nil, fmt.Errorf("bundle facts: %w", err)
	}
	nodeID, err := s.admissionID(ctx, rec.Name)
	if err != nil {
		return nil, fmt.Errorf("look up a former node named %s: %w", rec.Name, err)
	}
	hash := req.Secret.Hash()
	placed, err := s.ledger.Admit(ctx, Admission{
		Token: hash, NodeID: nodeID, Name: rec.Name, Role: trust.RoleNebula,
		SourceAddr: source.String(), NebulaPub: req.PublicKey, Version: "nebula", At: s.now(),
	})
	if err != nil {
		return nil, fmt.Errorf("admit %s: %w", rec.Name, err)
	}
	sreq := SignRequest{NodeID: nodeID, Name: placed.Name, Role: trust.RoleNebula, OverlayIP: placed.OverlayIP}
	cert, err := s.signer.SignNebula(ctx, sreq)
	if err != nil {
		return nil, s.abort(ctx, sreq, fmt.Errorf("sign Nebula certificate for %s: %w", rec.Name, err))
	}
	if err := s.ledger.RecordCerts(ctx, nodeID, nil, cert); err != nil {
		return nil, s.abort(ctx, sreq, fmt.Errorf("record the certificate of %s: %w", rec.Name, err))
	}
	s.log.Info("stock Nebula member admitted", "code", codes.EventNodeAdmitted, "name", placed.Name, "role", trust.RoleNebula,
		"node_id", nodeID, "token", shortHash(hash), "overlay_ip", placed.OverlayIP, "source", source)
	return s.nebulaAnswer(ctx, facts, rec.Name)
}

// nebulaRenew certifies the key an active stock Nebula member holds anew,
// spending the renewal token rec in the same raft entry that records the
// certificate.
func (s *Server) nebulaRenew(ctx context.Context, req NebulaRequest, rec TokenRecord) (*NebulaResponse, error) {
	m, ok, err := s.nebula.NebulaMember(ctx, rec.Name)
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", rec.Name, err)
	}
	if !ok || !m.Active {
		return nil, codes.Wrap(codes.NebulaRenewRefused, fmt.Errorf("%s is no active stock Nebula member", rec.Name))
	}
	if !sameNebulaKey(m.PublicKey, req.PublicKey) {
		return nil, codes.Wrap(codes.NebulaRenewRefused, fmt.Errorf("the key is not the one %s's certificate holds", rec.Name))
	}
	facts, err := s.nebula.NebulaFacts(ctx)
	if err != nil {
		return nil, fmt.Errorf("bundle facts: %w", err)
	}
	if _, err := s.nebula.RenewNebulaMember(ctx, req.Secret.Hash(), m.NodeID); err != nil {
		return nil, fmt.Errorf("renew %s: %w", rec.Name, err)
	}
	s.log.Info("stock Nebula member renewed", "code", codes.EventNebulaMemberRenewed, "name", rec.Name, "node_id", m.NodeID,
		"token", shortHash(req.Secret.Hash()))
	return s.nebulaAnswer(ctx, facts, rec.Name)
}

// nebulaResume answers a repeated first request whose token was spent on
// this very key (the answer was lost): the recorded certificate again,
// nothing written. nil, nil when the request is not that one.
func (s *Server) nebulaResume(ctx context.Context, req NebulaRequest, rec TokenRecord) (*NebulaResponse, error) {
	m, ok, err := s.nebula.NebulaMember(ctx, rec.Name)
	if err != nil || !ok || !m.Active || m.NodeID != rec.ConsumedBy || !sameNebulaKey(m.PublicKey, req.PublicKey) || !s.now().Before(rec.Expires) {
		return nil, nil
	}
	facts, err := s.nebula.NebulaFacts(ctx)
	if err != nil {
		return nil, fmt.Errorf("bundle facts: %w", err)
	}
	return s.nebulaAnswer(ctx, facts, rec.Name)
}

// nebulaAnswer is the response for the member name as the ledger now
// records it.
func (s *Server) nebulaAnswer(ctx context.Context, facts NebulaFacts, name string) (*NebulaResponse, error) {
	m, ok, err := s.nebula.NebulaMember(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read %s back: %w", name, err)
	}
	if !ok || len(m.Cert) == 0 {
		return nil, fmt.Errorf("read %s back: no certificate recorded", name)
	}
	return &NebulaResponse{
		NodeID: m.NodeID, Name: m.Name, ClusterID: facts.ClusterID, ClusterName: facts.ClusterName,
		CACert: facts.CACert, NebulaCACert: facts.NebulaCACert, NebulaCert: m.Cert, Expires: m.Expires,
		OverlayIP: m.OverlayIP, OverlayIP6: m.OverlayIP6, Groups: m.Groups,
		Lighthouses: facts.Lighthouses, Relays: facts.Relays, ServerTime: s.now(),
	}, nil
}

// sameNebulaKey reports whether two PEM Nebula public keys are the same
// key (their PEM text may differ).
func sameNebulaKey(a, b []byte) bool {
	ka, errA := NebulaPublicKey(a)
	kb, errB := NebulaPublicKey(b)
	return errA == nil && errB == nil && bytes.Equal(ka, kb)
}
