package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/crash"
	"github.com/meshd/meshd/enroll"
)

// remoteSigner is enroll.Signer on a control node that does not hold the
// CA: it sends the sign request, which names the admission, to the CA
// holder over mTLS; the CA holder checks it against raft (see
// admitted.go). If the CA holder cannot be reached the call fails with
// codes.CAHolderDown and the enroll server undoes the admission, so the
// token is unused again.
type remoteSigner struct{ p *Plane }

var _ enroll.Signer = remoteSigner{}

func (s remoteSigner) SignTLS(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	return s.call(ctx, PathSignTLS, req)
}

func (s remoteSigner) SignNebula(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	return s.call(ctx, PathSignNebula, req)
}

func (s remoteSigner) call(ctx context.Context, path string, req enroll.SignRequest) ([]byte, error) {
	addr, err := s.p.caHolderAddr()
	if err != nil {
		return nil, err
	}
	var out SignedCert
	if err := s.p.client.Call(ctx, addr, path, true, wireSignRequest(req), &out); err != nil {
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

// caSigner is enroll.Signer on the CA holder: the same admission check as
// a request from another control node, then the local CA signs.
type caSigner struct{ p *Plane }

var _ enroll.Signer = caSigner{}

func (s caSigner) SignTLS(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	return s.p.signFor(ctx, "", PathSignTLS, req)
}

func (s caSigner) SignNebula(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	return s.p.signFor(ctx, "", PathSignNebula, req)
}

// handleSignTLS and handleSignNebula serve other control nodes on the CA
// holder (the guard lets only control nodes in). The request names an
// admission; what is signed is what raft records for it.
func (p *Plane) handleSignTLS(w http.ResponseWriter, r *http.Request, c Caller) {
	p.handleSign(w, r, c, PathSignTLS)
}

func (p *Plane) handleSignNebula(w http.ResponseWriter, r *http.Request, c Caller) {
	p.handleSign(w, r, c, PathSignNebula)
}

func (p *Plane) handleSign(w http.ResponseWriter, r *http.Request, c Caller, what string) {
	var req SignRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	cert, err := p.signFor(r.Context(), c.NodeID, what, enroll.SignRequest(req))
	if err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, SignedCert{Cert: cert})
}

// signFor signs what (PathSignTLS or PathSignNebula) for the admission
// req names, on behalf of caller ("" for this node), and logs the outcome:
// a refusal as a warning with its code.
func (p *Plane) signFor(ctx context.Context, caller, what string, req enroll.SignRequest) ([]byte, error) {
	if caller == "" {
		caller = p.cfg.NodeID
	}
	sign := p.signAdmittedTLS
	if what == PathSignNebula {
		sign = p.signAdmittedNebula
	}
	crash.At(crash.SignerBeforeSign)
	cert, err := sign(ctx, req)
	if err != nil {
		if codes.Of(err) == codes.SignRefused {
			p.log.Warn("sign request refused", "code", codes.SignRefused, "caller", caller, "node_id", req.NodeID, "path", what, "err", err)
		}
		return nil, err
	}
	crash.At(crash.SignerAfterSign)
	p.log.Info("signed for an admission", "caller", caller, "node_id", req.NodeID, "path", what)
	return cert, nil
}

// wireSignRequest is req as the internal API carries it.
func wireSignRequest(req enroll.SignRequest) SignRequest { return SignRequest(req) }
