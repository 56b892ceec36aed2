package agent

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
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
	if req.DualStack && cl.Overlay6.IsValid() {
		return nil, codes.Wrap(codes.Overlay6Exists, fmt.Errorf("the cluster's overlay is dual-stack already (IPv6 overlay %s)", cl.Overlay6))
	}
	if cl.Rotation == nil {
		// Everything reversible first: the key pair is saved before raft
		// hears of it; an unused ca/next/ is overwritten by the next run.
		if next, err = nextCA(cl, req, h.a.d.Now()); err != nil {
			return nil, err
		}
		if err := statedir.ClearCANext(h.a.cfg.StateDir, cl.CAFingerprint); err != nil {
			return nil, codes.Wrap(codes.StateDir, err)
		}
		if err := next.Save(nextDir); err != nil {
			return nil, codes.Wrap(codes.StateDir, err)
		}
	} else if req.DualStack && !cl.Rotation.NextOverlay6.IsValid() {
		return nil, codes.Wrap(codes.BadRequest, errors.New("a CA rotation without --dual-stack is in progress: run `meshctl ca rotate` to finish it, then move with --dual-stack"))
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

// nextCA is the next CA pair of a rotation of cl: dual-stack when cl is
// (a rotation keeps the IPv6 overlay) or when req moves it to v2
// (state.ChooseOverlay6 of req's prefix: a generated ULA /64 by default;
// "none" is no move), else IPv4-only as before.
func nextCA(cl state.Cluster, req apitype.CARotateRequest, now time.Time) (*pki.CA, error) {
	v6 := cl.Overlay6
	if req.DualStack {
		if req.OverlayCIDR6 == state.Overlay6None {
			return nil, codes.Wrap(codes.Overlay6Invalid, errors.New("--dual-stack with --overlay-cidr6 none: give a prefix or leave the flag out"))
		}
		var err error
		if v6, err = state.ChooseOverlay6(cl.Overlay, req.OverlayCIDR6, req.Overlay6Global); err != nil {
			return nil, err
		}
	}
	if v6.IsValid() {
		return pki.NewDualStackCA(cl.Name, cl.Overlay, v6, now)
	}
	return pki.NewCA(cl.Name, cl.Overlay, now)
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
