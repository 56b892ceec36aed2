package enroll

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"net/netip"

	"github.com/meshd/meshd/pki"
)

// Admitted is what the ledger recorded for the node a token admitted, as
// much as a resumed enrollment needs.
type Admitted struct {
	NodeID     string
	Name       string
	Role       pki.Role
	TLSCert    []byte // PEM, the leaf issued at admission
	NebulaCert []byte // PEM, its current host cert
	NebulaPub  []byte // PEM
	OverlayIP  netip.Prefix
}

// Resumer is implemented by a Ledger that can look up the node a token
// admitted. With it, an enrollment whose response was lost (the cluster
// recorded the node, then the connection or the leader died) can be asked
// for again: the same secret, the same Nebula public key, and a CSR signed
// by the private key of the leaf already issued get the recorded
// certificates back instead of codes.TokenConsumed. Nothing new is signed
// or written, and nobody without the joiner's TLS private key can use it.
type Resumer interface {
	Admitted(ctx context.Context, nodeID string) (Admitted, bool, error)
}

// resume answers a repeated enrollment of the node rec admitted, or
// returns nil when the request is not that node's.
func (s *Server) resume(ctx context.Context, req Request, rec TokenRecord) *Response {
	r, ok := s.ledger.(Resumer)
	if !ok || rec.ConsumedBy == "" || !s.now().Before(rec.Expires) {
		return nil
	}
	a, found, err := r.Admitted(ctx, rec.ConsumedBy)
	if err != nil || !found || a.Name != req.Name || a.Name != rec.Name || !bytes.Equal(a.NebulaPub, req.NebulaPublic) {
		return nil
	}
	if err := sameKeyProven(req.CSR, a.TLSCert); err != nil {
		return nil
	}
	facts, err := s.ledger.JoinFacts(ctx, a.Role)
	if err != nil {
		return nil
	}
	leaf, err := pki.ParseCertPEM(a.TLSCert)
	if err != nil {
		return nil
	}
	s.log.Info("enrollment resumed: the response had been lost", "name", a.Name, "node_id", a.NodeID,
		"leaf_expires", leaf.NotAfter)
	return &Response{
		NodeID: a.NodeID, Name: a.Name, Role: a.Role,
		ClusterID: facts.ClusterID, ClusterName: facts.ClusterName,
		CACert: facts.CACert, TLSCert: a.TLSCert, NebulaCACert: facts.NebulaCACert, NebulaCert: a.NebulaCert,
		OverlayIP: a.OverlayIP, GossipKeys: facts.GossipKeys, Seeds: facts.Seeds, SerfPeers: facts.SerfPeers,
		Lighthouses: facts.Lighthouses, RaftPeers: facts.RaftPeers, ServerTime: s.now(),
	}
}

// sameKeyProven checks that csrDER is validly signed and carries the public
// key of the leaf in leafPEM: the caller holds that leaf's private key.
func sameKeyProven(csrDER, leafPEM []byte) error {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return err
	}
	if err := csr.CheckSignature(); err != nil {
		return err
	}
	leaf, err := pki.ParseCertPEM(leafPEM)
	if err != nil {
		return err
	}
	pub, ok := csr.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return errors.New("CSR key differs from the issued leaf's")
	}
	return nil
}
