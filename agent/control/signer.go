package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// remoteSigner is enroll.Signer on a control node that does not hold the
// CA: it asks the CA holder over mTLS. If the CA holder cannot be reached
// the admission fails with codes.CAHolderDown before anything is recorded,
// so the token stays unused.
type remoteSigner struct{ p *Plane }

var _ enroll.Signer = remoteSigner{}

func (s remoteSigner) SignTLS(ctx context.Context, req pki.LeafRequest) ([]byte, error) {
	return s.call(ctx, PathSignTLS, req)
}

func (s remoteSigner) SignNebula(ctx context.Context, req pki.NebulaRequest) ([]byte, error) {
	return s.call(ctx, PathSignNebula, req)
}

func (s remoteSigner) call(ctx context.Context, path string, req any) ([]byte, error) {
	addr, err := s.p.caHolderAddr()
	if err != nil {
		return nil, err
	}
	var out SignedCert
	if err := s.p.client.Call(ctx, addr, path, true, req, &out); err != nil {
		if errors.Is(err, ErrUnreachable) {
			return nil, codes.Wrap(codes.CAHolderDown, err)
		}
		return nil, err
	}
	return out.Cert, nil
}

// caHolderAddr is the CA holder's control address from the cluster record.
func (p *Plane) caHolderAddr() (string, error) {
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return "", codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	n, ok := p.raft.FSM().Node(c.CAHolder)
	if !ok || n.EnrollAddr == "" {
		return "", codes.Wrap(codes.CAHolderDown, fmt.Errorf("CA holder %s has no control address on record", c.CAHolder))
	}
	return n.EnrollAddr, nil
}

// handleSignTLS and handleSignNebula serve other control nodes on the CA
// holder (the guard lets only control nodes in). The request is signed as
// given, since a control node admits with the same authority.
func (p *Plane) handleSignTLS(w http.ResponseWriter, r *http.Request, c Caller) {
	var req pki.LeafRequest
	p.handleSign(w, r, c, &req, func() ([]byte, error) {
		if req.Lifetime == 0 {
			req.Lifetime = p.cfg.tlsLifetime()
		}
		return p.ca.SignTLS(req, p.now())
	})
}

func (p *Plane) handleSignNebula(w http.ResponseWriter, r *http.Request, c Caller) {
	var req pki.NebulaRequest
	p.handleSign(w, r, c, &req, func() ([]byte, error) {
		if req.Lifetime == 0 {
			req.Lifetime = p.cfg.NebulaLifetime
		}
		return p.ca.SignNebula(req, p.now())
	})
}

func (p *Plane) handleSign(w http.ResponseWriter, r *http.Request, c Caller, req any, sign func() ([]byte, error)) {
	if p.ca == nil {
		writeError(w, codes.Wrap(codes.CAHolderDown, errors.New("this node does not hold the CA")))
		return
	}
	if err := apitype.DecodeBody(r, req); err != nil {
		writeError(w, err)
		return
	}
	cert, err := sign()
	if err != nil {
		writeError(w, err)
		return
	}
	p.log.Info("signed for a control node", "caller", c.NodeID, "path", r.URL.Path)
	apitype.WriteJSON(w, http.StatusOK, SignedCert{Cert: cert})
}

// caSigner signs with the CA this node holds.
type caSigner struct {
	ca             *pki.CA
	now            func() time.Time
	nebulaLifetime time.Duration
	tlsLifetime    time.Duration
}

func (s caSigner) SignTLS(_ context.Context, req pki.LeafRequest) ([]byte, error) {
	if req.Lifetime == 0 {
		req.Lifetime = s.tlsLifetime
	}
	return s.ca.SignTLS(req, s.now())
}

func (s caSigner) SignNebula(_ context.Context, req pki.NebulaRequest) ([]byte, error) {
	if req.Lifetime == 0 {
		req.Lifetime = s.nebulaLifetime
	}
	return s.ca.SignNebula(req, s.now())
}
