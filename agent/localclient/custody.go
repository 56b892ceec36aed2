package localclient

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// CAHandoff moves CA custody from this node (the holder) to node.
func (c *Client) CAHandoff(ctx context.Context, node string) (*apitype.CACustody, error) {
	var r apitype.CACustody
	return &r, c.postJSON(ctx, apitype.PathCAHandoff, apitype.CAHandoffRequest{Node: node}, &r)
}
