package localclient

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// RotateCA runs `meshctl ca rotate [--now]` on the CA holder.
func (c *Client) RotateCA(ctx context.Context, now bool) (*apitype.CAStatus, error) {
	var r apitype.CAStatus
	return &r, c.postJSON(ctx, apitype.PathCARotate, apitype.CARotateRequest{Now: now}, &r)
}

// CAStatus reads the CA rotation's phase and what depends on the old CA.
func (c *Client) CAStatus(ctx context.Context) (*apitype.CAStatus, error) {
	var r apitype.CAStatus
	return &r, c.getJSON(ctx, apitype.PathCAStatus, &r)
}
