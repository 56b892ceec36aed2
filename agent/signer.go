package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// remoteSigner is enroll.Signer on a control node that does not hold the
// CA: it asks the CA holder over mTLS. If the CA holder cannot be reached
// the admission fails with codes.CAHolderDown before anything is recorded,
// so the token stays unused.
type remoteSigner struct{ rt *runtime }

var _ enroll.Signer = remoteSigner{}

type signedCert struct {
	Cert []byte `json:"cert"`
}

func (s remoteSigner) SignTLS(ctx context.Context, req pki.LeafRequest) ([]byte, error) {
	return s.call(ctx, internalSignTLSPath, req)
}

func (s remoteSigner) SignNebula(ctx context.Context, req pki.NebulaRequest) ([]byte, error) {
	return s.call(ctx, internalSignNebulaPath, req)
}

func (s remoteSigner) call(ctx context.Context, path string, req any) ([]byte, error) {
	addr, err := s.rt.caHolderAddr()
	if err != nil {
		return nil, err
	}
	var out signedCert
	if err := s.rt.callControl(ctx, addr, path, true, req, &out); err != nil {
		if errors.Is(err, errUnreachable) {
			return nil, codes.Wrap(codes.CAHolderDown, err)
		}
		return nil, err
	}
	return out.Cert, nil
}

// caHolderAddr is the CA holder's control address from the cluster record.
func (rt *runtime) caHolderAddr() (string, error) {
	c, ok := rt.raft.FSM().Cluster()
	if !ok {
		return "", codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	n, ok := rt.raft.FSM().Node(c.CAHolder)
	if !ok || n.EnrollAddr == "" {
		return "", codes.Wrap(codes.CAHolderDown, fmt.Errorf("CA holder %s has no control address on record", c.CAHolder))
	}
	return n.EnrollAddr, nil
}

// handleSignTLS and handleSignNebula serve other control nodes on the CA
// holder. Only control nodes may ask; the request is signed as given, since
// a control node admits with the same authority.
func (rt *runtime) handleSignTLS(w http.ResponseWriter, r *http.Request) {
	var req pki.LeafRequest
	rt.handleSign(w, r, &req, func() ([]byte, error) { return rt.ca.SignTLS(req, rt.now()) })
}

func (rt *runtime) handleSignNebula(w http.ResponseWriter, r *http.Request) {
	var req pki.NebulaRequest
	rt.handleSign(w, r, &req, func() ([]byte, error) {
		if req.Lifetime == 0 {
			req.Lifetime = rt.certLifetime
		}
		return rt.ca.SignNebula(req, rt.now())
	})
}

func (rt *runtime) handleSign(w http.ResponseWriter, r *http.Request, req any, sign func() ([]byte, error)) {
	caller, err := requirePeer(r, pki.RoleControl)
	if err != nil {
		writeInternalError(w, err)
		return
	}
	if rt.ca == nil {
		writeInternalError(w, codes.Wrap(codes.CAHolderDown, errors.New("this node does not hold the CA")))
		return
	}
	if err := decodeBody(r, req); err != nil {
		writeInternalError(w, err)
		return
	}
	cert, err := sign()
	if err != nil {
		writeInternalError(w, err)
		return
	}
	rt.log.Info("signed for a control node", "caller", caller, "path", r.URL.Path)
	writeJSON(w, http.StatusOK, signedCert{Cert: cert})
}
