package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// RotateCA is `meshctl ca rotate [--now]`, on the CA holder only: it
// creates the next CA (or resumes the rotation in progress with the one
// under ca/next/) and drives the rotation (control.Plane.RotateCA).
func (a *Agent) RotateCA(ctx context.Context, now bool, actor string) (*apitype.CAStatus, error) {
	ctl, err := a.controlPlane()
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
	nextDir := filepath.Join(a.cfg.StateDir, statedir.CADir, pki.CANextDir)
	var next *pki.CA
	if cl.Rotation == nil {
		// Everything reversible first: the key pair is saved before raft
		// hears of it; an unused ca/next/ is overwritten by the next run.
		if next, err = pki.NewCA(cl.Name, cl.Overlay, a.d.Now()); err != nil {
			return nil, err
		}
		if err := statedir.ClearCANext(a.cfg.StateDir, cl.CAFingerprint); err != nil {
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
	st, err := ctl.RotateCA(ctx, next, now, actor)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// CAStatus is `meshctl ca status` (control nodes).
func (a *Agent) CAStatus(ctx context.Context) (*apitype.CAStatus, error) {
	ctl, err := a.controlPlane()
	if err != nil {
		return nil, err
	}
	st, err := ctl.CAStatus(ctx)
	if err != nil {
		return nil, err
	}
	return &st, nil
}
