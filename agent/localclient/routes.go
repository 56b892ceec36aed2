package localclient

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// Routes lists every prefix on record and this node's exit node.
func (c *Client) Routes(ctx context.Context) (*apitype.Routes, error) {
	var r apitype.Routes
	return &r, c.getJSON(ctx, apitype.PathRoutes, &r)
}

// AdvertiseRoutes asks the cluster to let this node carry prefixes.
func (c *Client) AdvertiseRoutes(ctx context.Context, req apitype.AdvertiseRequest) (*apitype.Routes, error) {
	var r apitype.Routes
	return &r, c.postJSON(ctx, apitype.PathRoutesAdvertise, req, &r)
}

// RouteDecision approves, withdraws or moves a node's prefix on a
// control node: path is PathRoutesApprove, PathRoutesWithdraw or
// PathRoutesPrefer.
func (c *Client) RouteDecision(ctx context.Context, path string, req apitype.RouteRequest) (*apitype.Routes, error) {
	var r apitype.Routes
	return &r, c.postJSON(ctx, path, req, &r)
}

// UseExit sends this node's default route through an exit node ("" for
// none).
func (c *Client) UseExit(ctx context.Context, node string) (*apitype.ExitState, error) {
	var r *apitype.ExitState
	return r, c.postJSON(ctx, apitype.PathExit, apitype.ExitRequest{Node: node}, &r)
}
