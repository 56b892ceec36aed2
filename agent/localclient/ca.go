package localclient

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// RotateCA runs `meshctl ca rotate [--now] [--dual-stack ...]` on the CA
// holder.
func (c *Client) RotateCA(ctx context.Context, req apitype.CARotateRequest) (*apitype.CAStatus, error) {
	var r apitype.CAStatus
	return &r, c.postJSON(ctx, apitype.PathCARotate, req, &r)
}

// CAStatus reads the CA rotation's phase and what depends on the old CA.
func (c *Client) CAStatus(ctx context.Context) (*apitype.CAStatus, error) {
	var r apitype.CAStatus
	return &r, c.getJSON(ctx, apitype.PathCAStatus, &r)
}
