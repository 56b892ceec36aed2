package enroll

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/crash"
	"github.com/meshd/meshd/trust"
)

// enrollIdentity admits the joiner of a join by identity: it carries a
// JWT instead of a token secret and names no node. Checks that need
// nothing run first (no secret or name alongside, the JWT's size, the
// joiner's clock), then the verifier (signature, issuer, audience,
// lifetime, the issuer's claim rules), then what the admission records:
// the FSM refuses a JWT that admitted anyone before (codes.JWTReplayed)
// as it applies the admission. The same machine asking again with the
// same JWT and keys (its answer lost) resumes, like a key's joiner.
func (s *Server) enrollIdentity(ctx context.Context, req Request, source netip.Addr) (*Response, error) {
	switch {
	case !req.Secret.IsZero() || req.Name != "":
		return nil, codes.Wrap(codes.EnrollRejected, errors.New("a join by JWT carries no token secret and names no node"))
	case len(req.JWT) > MaxJWT:
		return nil, codes.Wrap(codes.JWTInvalid, fmt.Errorf("JWT of %d bytes, at most %d", len(req.JWT), MaxJWT))
	case s.ids == nil:
		return nil, codes.Wrap(codes.JWTIssuerUnknown, errNoIdentities)
	}
	if err := s.judgeClock(claim{Name: "(by JWT)", Clock: req.Clock}, s.now()); err != nil {
		return nil, err
	}
	id, err := s.ids.Verify(ctx, string(req.JWT))
	if err != nil {
		return nil, err
	}
	if err := id.Check(); err != nil {
		return nil, err
	}
	if req.Ephemeral && id.Role != trust.RoleWorker {
		return nil, codes.Wrap(codes.BadRole, fmt.Errorf("only a worker can be ephemeral; the JWT admits a %s node", id.Role))
	}
	if req.Underlay != "" {
		if _, err := netip.ParseAddr(req.Underlay); err != nil {
			return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("underlay address %q: %w", req.Underlay, err))
		}
	} else if id.Role == trust.RoleControl {
		return nil, codes.Wrap(codes.EnrollRejected, errors.New("a control node must advertise its underlay address"))
	}
	tlsKey, err := trust.CSRPublicKey(req.CSR)
	if err != nil {
		return nil, err
	}
	facts, err := s.ledger.JoinFacts(ctx, id.Role)
	if err != nil {
		return nil, fmt.Errorf("join facts: %w", err)
	}
	replay, err := id.ReplayKey()
	if err != nil {
		return nil, codes.Wrap(codes.JWTNoRule, fmt.Errorf("identity of %s: %w", id.Subject, err))
	}
	nodeID := KeyNodeID(replay, tlsKey)
	if resp, err := s.resumeKey(ctx, req, TokenRecord{Hash: replay}, nodeID); resp != nil || err != nil {
		return resp, err
	}
	placed, err := s.ledger.Admit(ctx, Admission{
		NodeID: nodeID, Name: id.Name, Role: id.Role,
		Underlay: req.Underlay, SourceAddr: source.String(), Relay: req.Relay,
		TLSPublicKey: tlsKey, NebulaPub: req.NebulaPublic,
		Version: req.Version, Ports: req.Ports, At: s.now(), Ephemeral: req.Ephemeral, Identity: &id,
	})
	if err != nil {
		return nil, fmt.Errorf("admit %s by JWT: %w", id.Subject, err)
	}
	crash.At(crash.EnrollAfterAdmit)
	tlsCert, nebulaCert, err := s.certify(ctx, SignRequest{NodeID: nodeID, Name: placed.Name, Role: id.Role,
		OverlayIP: placed.OverlayIP, CSR: req.CSR})
	if err != nil {
		return nil, err
	}
	s.log.Info("node admitted by JWT", "code", codes.EventNodeAdmitted, "name", placed.Name, "role", id.Role,
		"node_id", nodeID, "issuer", id.Issuer, "subject", id.Subject, "rule", id.Rule, "overlay_ip", placed.OverlayIP, "source", source)
	return s.answer(facts, Admitted{NodeID: nodeID, Name: placed.Name, Role: id.Role, TLSCert: tlsCert, NebulaCert: nebulaCert,
		OverlayIP: placed.OverlayIP}), nil
}
