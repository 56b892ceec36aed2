package localclient

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// Ping asks the daemon for one probe of a node over the overlay.
func (c *Client) Ping(ctx context.Context, req apitype.PingRequest) (*apitype.PingReply, error) {
	var r apitype.PingReply
	return &r, c.postJSON(ctx, apitype.PathPing, req, &r)
}
