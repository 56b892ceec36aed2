package localclient

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// Netcheck asks the daemon for a path check against the control nodes
// (`meshctl netcheck`).
func (c *Client) Netcheck(ctx context.Context) (*apitype.NetcheckReport, error) {
	var r apitype.NetcheckReport
	return &r, c.getJSON(ctx, apitype.PathNetcheck, &r)
}
