package agent

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// RotateKeys replaces the cluster's gossip key from this control node
// (control.Plane.RotateKeys): the operator's `meshctl keys rotate`.
func (a *Agent) RotateKeys(ctx context.Context, actor string) (*apitype.KeyRotation, error) {
	ctl, err := a.controlPlane()
	if err != nil {
		return nil, err
	}
	r, err := ctl.RotateKeys(ctx, actor)
	if err != nil {
		return nil, err
	}
	return &apitype.KeyRotation{Keys: r.Keys, PrimaryKey: r.Primary, Members: r.Members, Took: r.Took}, nil
}
