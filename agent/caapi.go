package agent

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// The local API's CA doors (control nodes; rotate on the CA holder only).

func (h api) postRotateCA(r *http.Request, req apitype.CARotateRequest) (*apitype.CAStatus, error) {
	ctx, actor := r.Context(), h.a.operator(r.Context())
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	if !ctl.HoldsCA() {
		return nil, codes.Wrap(codes.NotCAHolder, errors.New("this node does not hold the CA keys; run `meshctl ca rotate` on the CA holder"))
	}
	if err := ctl.SyncRead(ctx); err != nil {
		return nil, err
	}
	cl, ok := ctl.Raft().FSM().Cluster()
	if !ok {
		return nil, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	nextDir := filepath.Join(h.a.cfg.StateDir, statedir.CADir, pki.CANextDir)
	var next *pki.CA
	if cl.Rotation == nil {
		// Everything reversible first: the key pair is saved before raft
		// hears of it; an unused ca/next/ is overwritten by the next run.
		if next, err = pki.NewCA(cl.Name, cl.Overlay, h.a.d.Now()); err != nil {
			return nil, err
		}
		if err := statedir.ClearCANext(h.a.cfg.StateDir, cl.CAFingerprint); err != nil {
			return nil, codes.Wrap(codes.StateDir, err)
		}
		if err := next.Save(nextDir); err != nil {
			return nil, codes.Wrap(codes.StateDir, err)
		}
	} else if ctl.CAByFingerprint(cl.Rotation.NextCAFingerprint) == nil {
		if next, err = pki.LoadCA(nextDir); err != nil {
			return nil, codes.Wrap(codes.StateCorrupt, fmt.Errorf("the next CA of the rotation in progress: %w", err))
		}
		ctl.AddCA(next)
	}
	st, err := ctl.RotateCA(ctx, next, req.Now, actor)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

func (h api) getCAStatus(r *http.Request) (*apitype.CAStatus, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	st, err := ctl.CAStatus(r.Context())
	if err != nil {
		return nil, err
	}
	return &st, nil
}

func (h api) caHandoff(r *http.Request, req apitype.CAHandoffRequest) (apitype.CACustody, error) {
	ctl, err := h.a.controlPlane()
	if err == nil && req.Node == "" {
		err = codes.Wrap(codes.BadRequest, errors.New("name the node to hand the CA to"))
	}
	if err != nil {
		return apitype.CACustody{}, err
	}
	ho, err := ctl.Handoff(r.Context(), h.a.nodeArg(req.Node), h.a.operator(r.Context()))
	if err != nil {
		return apitype.CACustody{}, err
	}
	out := apitype.CACustody{From: ho.From, To: ho.To, Already: ho.Already, Released: ho.Released, Took: ho.Took}
	if ho.ReleaseErr != nil {
		out.Warnings = append(out.Warnings, apitype.Warning{Code: codes.OrInternal(ho.ReleaseErr),
			Detail: "custody moved; this node's copy of the keys is deleted by a later pass: " + ho.ReleaseErr.Error()})
	}
	return out, nil
}

func (h api) caBackup(r *http.Request, req apitype.CABackupRequest) (apitype.CABackup, error) {
	pass := []byte(req.Passphrase)
	defer clear(pass)
	ctl, err := h.a.controlPlane()
	if err != nil {
		return apitype.CABackup{}, err
	}
	sealed, at, err := ctl.Backup(r.Context(), pass, h.a.operator(r.Context()))
	if err != nil {
		return apitype.CABackup{}, err
	}
	c, _ := ctl.Raft().FSM().Cluster()
	return apitype.CABackup{Sealed: sealed, At: at, Cluster: c.Name, ClusterID: c.ID}, nil
}

func (h api) caRestore(r *http.Request, req apitype.CARestoreRequest) (apitype.CACustody, error) {
	pass := []byte(req.Passphrase)
	defer clear(pass)
	ctl, err := h.a.controlPlane()
	if err != nil {
		return apitype.CACustody{}, err
	}
	ho, err := ctl.Restore(r.Context(), req.Sealed, pass, h.a.operator(r.Context()))
	if err != nil {
		return apitype.CACustody{}, err
	}
	return apitype.CACustody{From: ho.From, To: ho.To, Released: ho.Released, Took: ho.Took}, nil
}
