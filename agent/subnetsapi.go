package agent

import (
	"context"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
)

// The local API of routes and exit nodes (issue 33): what a member asks
// and uses runs on its runtime (agent/member/subnets.go), what an
// operator decides on a control node's plane (agent/control/subnets.go).

func (h api) getRoutes(*http.Request) (apitype.Routes, error) {
	rt, err := h.a.running()
	if err != nil {
		return apitype.Routes{}, err
	}
	return rt.RouteList(), nil
}

func (h api) postAdvertise(r *http.Request, req apitype.AdvertiseRequest) (*apitype.Routes, error) {
	rt, err := h.a.running()
	if err != nil {
		return nil, err
	}
	if err := rt.AdvertiseRoutes(r.Context(), req); err != nil {
		return nil, err
	}
	out := rt.RouteList()
	return &out, nil
}

// postApproveRoute, postWithdrawRoute and postPreferCarrier decide on a
// node's prefix on this control node, the operator the audit actor.
func (h api) postApproveRoute(r *http.Request, req apitype.RouteRequest) (*apitype.Routes, error) {
	return h.routeDecision(r, req, (*control.Plane).ApproveRoute)
}

func (h api) postWithdrawRoute(r *http.Request, req apitype.RouteRequest) (*apitype.Routes, error) {
	return h.routeDecision(r, req, (*control.Plane).WithdrawRoute)
}

func (h api) postPreferCarrier(r *http.Request, req apitype.RouteRequest) (*apitype.Routes, error) {
	return h.routeDecision(r, req, (*control.Plane).PreferCarrier)
}

func (h api) routeDecision(r *http.Request, req apitype.RouteRequest,
	do func(*control.Plane, context.Context, apitype.RouteRequest, string) error) (*apitype.Routes, error) {
	ctl, err := h.a.controlPlane()
	if err != nil {
		return nil, err
	}
	req.Node = h.a.nodeArg(req.Node)
	if err := do(ctl, r.Context(), req, h.a.operator(r.Context())); err != nil {
		return nil, err
	}
	rt, err := h.a.running()
	if err != nil {
		return nil, err
	}
	out := rt.RouteList()
	return &out, nil
}

func (h api) getExit(*http.Request) (*apitype.ExitState, error) {
	rt, err := h.a.running()
	if err != nil {
		return nil, err
	}
	return rt.RouteList().Exit, nil
}

func (h api) postExit(r *http.Request, req apitype.ExitRequest) (*apitype.ExitState, error) {
	rt, err := h.a.running()
	if err != nil {
		return nil, err
	}
	return rt.UseExit(r.Context(), h.a.nodeArg(req.Node))
}
