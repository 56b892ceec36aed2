package control

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// Routes and exit nodes (issue 33, DESIGN §11): a node asks for the
// prefixes it would carry over its own mTLS leaf (PathSelfRoutes, the
// body names no node); an operator on a control node approves, withdraws
// or moves each (ApproveRoute, WithdrawRoute, PreferCarrier). The CA
// holder reissues a router's Nebula certificate to hold exactly its
// approved prefixes (renew.go), the watch carries each record's routes
// to every member (watchitems.go), and each member points its Nebula's
// unsafe_routes at each prefix's carrier (agent/member/subnets.go). The
// leader moves a prefix off a carrier it cannot reach (carrier.go).

// PathSelfRoutes is where a member records the prefixes it asks to carry.
const PathSelfRoutes = "/v1/self/routes"

// SelfRoutesRequest is PathSelfRoutes' body.
type SelfRoutesRequest struct {
	Prefixes []netip.Prefix `json:"prefixes"`
}

// handleSelfRoutes records the caller's request (state.AdvertiseRoutes on
// its own node id) and tells every member, like a relay offer. Every
// route entry this node writes is judged by state.RulesApproved: a
// request constrains nobody until an operator approves it (issue 52).
func (p *Plane) handleSelfRoutes(w http.ResponseWriter, r *http.Request, c Caller) {
	var req SelfRoutesRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := p.Write(r.Context(), &state.AdvertiseRoutes{NodeID: c.NodeID, Prefixes: req.Prefixes, At: p.now(), Actor: p.relayedActor(c, ""),
		Rules: state.RulesApproved}); err != nil {
		writeError(w, err)
		return
	}
	p.told()
	apitype.WriteJSON(w, http.StatusOK, Empty{})
}

// told pokes this node's overlay and tells every member that records
// changed, so workers follow at once.
func (p *Plane) told() {
	p.hooks.Poke()
	if err := p.hooks.NotifyRevoked(); err != nil {
		p.log.Debug("could not tell the workers about a route change; the watch brings it", "err", err)
	}
}

// AdvertiseOwn records the prefixes this control node asks to carry.
func (p *Plane) AdvertiseOwn(ctx context.Context, prefixes []netip.Prefix) error {
	if err := p.Write(ctx, &state.AdvertiseRoutes{NodeID: p.cfg.NodeID, Prefixes: prefixes, At: p.now().UTC(), Actor: p.self(),
		Rules: state.RulesApproved}); err != nil {
		return err
	}
	p.told()
	return nil
}

// advertiseRoutesRule: like a relay offer, a control node forwards its
// own request or a worker's (relayed from the worker's own POST
// PathSelfRoutes), never another control node's.
func advertiseRoutesRule(p *Plane, c Caller, cmd state.Command) error {
	s := cmd.(state.AdvertiseRoutes)
	if s.NodeID == c.NodeID {
		return nil
	}
	if n, ok := p.raft.FSM().Node(s.NodeID); ok && n.Role == pki.RoleWorker {
		return nil
	}
	return fmt.Errorf("%s may not ask routes for node %s", c.NodeID, s.NodeID)
}

// routeArgs reads an operator's node name and prefix.
func (p *Plane) routeArgs(req apitype.RouteRequest) (state.Node, netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(req.Prefix)
	if err != nil {
		return state.Node{}, netip.Prefix{}, codes.Wrap(codes.RouteBad, fmt.Errorf("%q: %w", req.Prefix, err))
	}
	n, ok := p.raft.FSM().NodeByName(req.Node)
	if !ok {
		return state.Node{}, netip.Prefix{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node named %q", req.Node))
	}
	return n, pfx, nil
}

// ApproveRoute approves req.Node's prefix (`meshctl routes approve`).
func (p *Plane) ApproveRoute(ctx context.Context, req apitype.RouteRequest, actor string) error {
	return p.routeWrite(ctx, req, func(n state.Node, pfx netip.Prefix) state.Command {
		return &state.ApproveRoute{NodeID: n.ID, Prefix: pfx, At: p.now().UTC(), Actor: actor, Rules: state.RulesApproved}
	})
}

// WithdrawRoute takes req.Node's approval of a prefix back (`meshctl
// routes withdraw`).
func (p *Plane) WithdrawRoute(ctx context.Context, req apitype.RouteRequest, actor string) error {
	return p.routeWrite(ctx, req, func(n state.Node, pfx netip.Prefix) state.Command {
		return &state.WithdrawRoute{NodeID: n.ID, Prefix: pfx, At: p.now().UTC(), Actor: actor}
	})
}

// PreferCarrier moves a prefix to req.Node (`meshctl routes prefer`):
// how an operator moves it back after a failover. The node must answer
// over the overlay now: a prefix is never moved to a router that is down.
func (p *Plane) PreferCarrier(ctx context.Context, req apitype.RouteRequest, actor string) error {
	if err := p.SyncRead(ctx); err != nil {
		return err
	}
	n, pfx, err := p.routeArgs(req)
	if err != nil {
		return err
	}
	if p.hooks.Reach != nil {
		if err := p.reach(ctx, n.OverlayIP); err != nil {
			return codes.Wrap(codes.CarrierUnreachable, fmt.Errorf("%s does not answer over the overlay (%v): %s stays where it is", n.Name, err, pfx))
		}
	}
	from := carrierIn(p.raft.FSM().Nodes(), pfx)
	if err := p.Write(ctx, &state.SetCarrier{Prefix: pfx, NodeID: n.ID, From: from, Reason: "operator", At: p.now().UTC(), Actor: actor}); err != nil {
		return err
	}
	p.told()
	return nil
}

func (p *Plane) routeWrite(ctx context.Context, req apitype.RouteRequest, cmd func(state.Node, netip.Prefix) state.Command) error {
	if err := p.SyncRead(ctx); err != nil { // the node's request may have reached another control node a moment ago
		return err
	}
	n, pfx, err := p.routeArgs(req)
	if err != nil {
		return err
	}
	if err := p.Write(ctx, cmd(n, pfx)); err != nil {
		return err
	}
	p.told()
	return nil
}

// carrierIn is the id of the node carrying pfx among nodes ("" for none).
func carrierIn(nodes []state.Node, pfx netip.Prefix) string {
	for _, n := range nodes {
		if slices.ContainsFunc(n.Routes, func(r state.Route) bool { return r.Prefix == pfx && r.Carrier }) {
			return n.ID
		}
	}
	return ""
}

// NodeRoutes is n's routes as the API shows them.
func NodeRoutes(n state.Node) []apitype.NodeRoute {
	if len(n.Routes) == 0 {
		return nil
	}
	out := make([]apitype.NodeRoute, len(n.Routes))
	for i, r := range n.Routes {
		out[i] = apitype.NodeRoute{Prefix: r.Prefix.String(), Exit: r.Exit(), Approved: r.Approved, ApprovedBy: r.ApprovedBy,
			Carrier: r.Carrier, Held: slices.Contains(n.NebulaRoutes, r.Prefix)}
	}
	return out
}

// RouteRows lists every prefix the active records ask for, sorted by
// prefix then node: `meshctl routes list`, from any member's view of the
// records (gossip by node name, as this node sees it).
func RouteRows(recs []apitype.Node, gossip map[string]string) []apitype.RouteRow {
	var out []apitype.RouteRow
	for _, n := range recs {
		if n.State != string(state.NodeActive) {
			continue
		}
		for _, r := range n.Routes {
			row := apitype.RouteRow{Prefix: r.Prefix, Node: n.Name, Exit: r.Exit, State: "requested", ApprovedBy: r.ApprovedBy,
				Carrier: r.Carrier, Gossip: gossip[n.Name]}
			if r.Approved {
				row.State = "approved"
				row.Active = r.Carrier || (r.Exit && row.Gossip == "alive")
				row.Standby = !r.Carrier && !r.Exit
			}
			out = append(out, row)
		}
	}
	slices.SortFunc(out, func(a, b apitype.RouteRow) int {
		pa, _ := netip.ParsePrefix(a.Prefix)
		pb, _ := netip.ParsePrefix(b.Prefix)
		if c := pa.Addr().Compare(pb.Addr()); c != 0 {
			return c
		}
		if pa.Bits() != pb.Bits() {
			return pa.Bits() - pb.Bits()
		}
		if a.Node < b.Node {
			return -1
		}
		if a.Node > b.Node {
			return 1
		}
		return 0
	})
	return out
}
