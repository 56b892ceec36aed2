package enroll

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshd/meshd/trust"
)

// Admitted is what the ledger recorded for the node a token admitted, as
// much as a resumed enrollment needs.
type Admitted struct {
	NodeID string
	Name   string
	Role   trust.Role
	// Joining is true while the record has no certificates yet: the
	// admission was recorded, then signing or recording the certificates
	// failed and could not be undone.
	Joining      bool
	TLSPublicKey []byte // PKIX DER, the key the node's leaf certifies
	TLSCert      []byte // PEM, the leaf issued at admission; empty while joining
	NebulaCert   []byte // PEM, its current host cert; empty while joining
	NebulaPub    []byte // PEM
	OverlayIP    netip.Prefix
}

// Resumer is implemented by a Ledger that can look up the node a token
// admitted. With it, an enrollment that did not finish can be asked for
// again with the same secret, the same Nebula public key, and a CSR signed
// by the TLS private key the cluster recorded:
//   - the node is active (the response was lost): the recorded
//     certificates come back instead of codes.TokenConsumed, and nothing
//     new is signed or written;
//   - the node is still joining (signing failed and the undo could not be
//     written): the admission is finished, signed for the recorded keys
//     and recorded, never recorded a second time.
//
// Nobody without the joiner's TLS private key can use it.
type Resumer interface {
	Admitted(ctx context.Context, nodeID string) (Admitted, bool, error)
}

// resume answers a repeated enrollment of the node rec admitted. It returns
// nil, nil when the request is not that node's (the caller then says the
// token was consumed), and an error when the admission could not be looked
// up (no leader for the read index: the joiner keeps its keys and runs the
// same join again) or finishing a joining admission failed.
func (s *Server) resume(ctx context.Context, req Request, rec TokenRecord) (*Response, error) {
	r, ok := s.ledger.(Resumer)
	if !ok || rec.ConsumedBy == "" || !s.now().Before(rec.Expires) {
		s.log.Debug("no resume: no resumer, no consumer or token expired", "name", rec.Name, "consumed_by", rec.ConsumedBy)
		return nil, nil
	}
	a, found, err := r.Admitted(ctx, rec.ConsumedBy)
	if err != nil {
		// Not "token used": the record could not be read (no leader
		// for the read index, as when the control node that admitted
		// this very join has just died). Say so, so the joiner keeps its
		// keys and the same join run again resumes.
		return nil, fmt.Errorf("look up the admission of token for %s: %w", rec.Name, err)
	}
	if !found || a.Name != req.Name || a.Name != rec.Name {
		s.log.Debug("no resume: the token's node is not this request's", "name", rec.Name, "node_id", rec.ConsumedBy, "found", found)
		return nil, nil
	}
	return s.resumeAdmitted(ctx, req, a)
}

// resumeKey answers a repeated enrollment with a reusable key: the node
// id a key gives is KeyNodeID(key, the joiner's TLS key), so a record of
// that id is this machine's earlier admission with this key. It returns
// nil, nil when there is none (a first join: admit it) or the request does
// not prove the recorded keys.
func (s *Server) resumeKey(ctx context.Context, req Request, rec TokenRecord, nodeID string) (*Response, error) {
	r, ok := s.ledger.(Resumer)
	if !ok {
		return nil, nil
	}
	a, found, err := r.Admitted(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("look up an earlier admission with key %s: %w", shortHash(rec.Hash), err)
	}
	if !found {
		return nil, nil
	}
	return s.resumeAdmitted(ctx, req, a)
}

// resumeAdmitted finishes or repeats the admission a when req proves the
// keys it recorded (the same Nebula public key, a CSR signed by the
// recorded TLS key), and returns nil, nil when it does not.
func (s *Server) resumeAdmitted(ctx context.Context, req Request, a Admitted) (*Response, error) {
	if !bytes.Equal(a.NebulaPub, req.NebulaPublic) {
		s.log.Debug("no resume: another Nebula key", "name", a.Name, "node_id", a.NodeID)
		return nil, nil
	}
	recorded, err := recordedKey(a)
	if err == nil {
		err = sameKeyProven(req.CSR, recorded)
	}
	if err != nil {
		s.log.Debug("no resume: the request does not prove the recorded key", "name", a.Name, "node_id", a.NodeID, "err", err)
		return nil, nil
	}
	facts, err := s.ledger.JoinFacts(ctx, a.Role)
	if err != nil {
		return nil, fmt.Errorf("join facts: %w", err)
	}
	if a.Joining {
		s.log.Info("enrollment resumed: finishing an admission recorded without certificates", "name", a.Name, "node_id", a.NodeID)
		a.TLSCert, a.NebulaCert, err = s.certify(ctx, SignRequest{NodeID: a.NodeID, Name: a.Name, Role: a.Role,
			OverlayIP: a.OverlayIP, CSR: req.CSR})
		if err != nil {
			return nil, err
		}
	} else {
		s.log.Info("enrollment resumed: the response had been lost", "name", a.Name, "node_id", a.NodeID)
	}
	return s.answer(facts, a), nil
}

// recordedKey is the TLS public key the joiner must prove it holds: the
// recorded key of a joining node, the key of the issued leaf otherwise.
func recordedKey(a Admitted) (crypto.PublicKey, error) {
	if a.Joining {
		if len(a.TLSPublicKey) == 0 {
			return nil, errors.New("joining record without a TLS public key")
		}
		return x509.ParsePKIXPublicKey(a.TLSPublicKey)
	}
	leaf, err := trust.ParseCertPEM(a.TLSCert)
	if err != nil {
		return nil, err
	}
	return leaf.PublicKey, nil
}

// sameKeyProven checks that csrDER is validly signed and carries key: the
// caller holds its private key.
func sameKeyProven(csrDER []byte, key crypto.PublicKey) error {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return err
	}
	if err := csr.CheckSignature(); err != nil {
		return err
	}
	pub, ok := csr.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key) {
		return errors.New("CSR key differs from the recorded one")
	}
	return nil
}

// answer is the response to an admitted joiner: what the cluster recorded
// for it (a's id, name, role, certificates and overlay IP) and the
// cluster's facts. Every way a join ends in an admission answers with it:
// a fresh one, a key's or a JWT's, a resumed one.
func (s *Server) answer(facts JoinFacts, a Admitted) *Response {
	return &Response{
		NodeID: a.NodeID, Name: a.Name, Role: a.Role,
		ClusterID: facts.ClusterID, ClusterName: facts.ClusterName,
		CACert: facts.CACert, TLSCert: a.TLSCert, NebulaCACert: facts.NebulaCACert, NebulaCert: a.NebulaCert,
		OverlayIP: a.OverlayIP, GossipKeys: facts.GossipKeys, Seeds: facts.Seeds, SerfPeers: facts.SerfPeers,
		Lighthouses: facts.Lighthouses, RaftPeers: facts.RaftPeers, ServerTime: s.now(),
	}
}
