package state

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// Routes (issue 33, DESIGN §11): a node asks to carry prefixes behind it
// (AdvertiseRoutes, from the node itself), a control node's operator
// approves each (ApproveRoute) or withdraws an approval (WithdrawRoute).
// An approved prefix is carried by exactly one node at a time, its
// carrier: Route.Carrier on that node's record. The FSM keeps that true
// after every command that can break it (settleCarriers): a carrier that
// is no longer an active node with the prefix approved loses it to the
// approved router approved first. The leader moves a carrier it sees
// down to a live router (SetCarrier, compare-and-set); an operator moves
// it back the same way (`meshctl routes prefer`). Nothing else moves a
// carrier, so it does not flap.
//
// The exit prefix 0.0.0.0/0 is approved like any route but has no
// carrier: each member picks its exit node itself (`meshctl exit use`).

// ExitPrefix is the prefix an exit node carries.
var ExitPrefix = netip.MustParsePrefix("0.0.0.0/0")

// MaxRoutesPerNode bounds one node's requested prefixes.
const MaxRoutesPerNode = 64

// Route is one prefix a node asked to carry.
type Route struct {
	Prefix     netip.Prefix `json:"prefix"`
	Approved   bool         `json:"approved,omitempty"`
	ApprovedAt time.Time    `json:"approved_at,omitzero"`
	ApprovedBy string       `json:"approved_by,omitempty"`
	// Carrier: this node carries the prefix now (never for ExitPrefix).
	Carrier bool `json:"carrier,omitempty"`
}

// Exit reports whether r is an exit node's default route.
func (r Route) Exit() bool { return r.Prefix == ExitPrefix }

// ApprovedRoutes are the prefixes n is approved to carry, sorted by
// netip.Prefix.Compare (as pki.NebulaRoutes reads a certificate's): what
// its Nebula certificate must hold as unsafe networks.
func (n Node) ApprovedRoutes() []netip.Prefix {
	var out []netip.Prefix
	for _, r := range n.Routes {
		if r.Approved {
			out = append(out, r.Prefix)
		}
	}
	return out
}

// AdvertiseRoutes replaces the prefixes a node asks to carry (`meshctl
// routes advertise`, sent by the node itself over its own mTLS leaf). A
// prefix asked again keeps its approval; one left out loses it (and its
// carrier moves). Refused, with nothing changed: a node that is not
// active, a malformed or IPv6 prefix, one that overlaps the overlay, two
// that overlap each other, one that overlaps another node's prefix
// without being equal to it (two routers for one prefix are allowed:
// that is failover; under RulesApproved only another node's approved
// prefix counts), and one that holds a control node's or relay's
// underlay address (the tunnel to it would route into itself).
type AdvertiseRoutes struct {
	NodeID   string         `json:"node_id"`
	Prefixes []netip.Prefix `json:"prefixes"`
	At       time.Time      `json:"at"`
	Actor    string         `json:"actor,omitempty"`
	// Rules judge the request (routerules.go); entries written before
	// issue 52 name none: RulesRequested.
	Rules RouteRules `json:"rules,omitempty"`
}

// ApproveRoute approves a prefix the node asked for (`meshctl routes
// approve NODE CIDR` on a control node); the audit event names who.
// Approving an approved prefix changes nothing. Refused: a prefix that
// holds a control node's or relay's underlay address and, under
// RulesApproved, one that overlaps another active node's approved prefix
// without being equal to it.
type ApproveRoute struct {
	NodeID string       `json:"node_id"`
	Prefix netip.Prefix `json:"prefix"`
	At     time.Time    `json:"at"`
	Actor  string       `json:"actor,omitempty"`
	Rules  RouteRules   `json:"rules,omitempty"` // as AdvertiseRoutes.Rules
}

// WithdrawRoute takes an approval back (`meshctl routes withdraw NODE
// CIDR`); the node's request stays, unapproved.
type WithdrawRoute struct {
	NodeID string       `json:"node_id"`
	Prefix netip.Prefix `json:"prefix"`
	At     time.Time    `json:"at"`
	Actor  string       `json:"actor,omitempty"`
}

// SetCarrier moves a prefix to another approved, active router, if its
// carrier is still From (compare-and-set: a decision made on a view that
// is no longer true changes nothing and fails with codes.Conflict).
// Reason is for the audit log ("carrier down", "operator").
type SetCarrier struct {
	Prefix netip.Prefix `json:"prefix"`
	NodeID string       `json:"node_id"`
	From   string       `json:"from"`
	Reason string       `json:"reason,omitempty"`
	At     time.Time    `json:"at"`
	Actor  string       `json:"actor,omitempty"`
}

func (AdvertiseRoutes) commandType() cmdType { return typeAdvertiseRoutes }
func (ApproveRoute) commandType() cmdType    { return typeApproveRoute }
func (WithdrawRoute) commandType() cmdType   { return typeWithdrawRoute }
func (SetCarrier) commandType() cmdType      { return typeSetCarrier }

func (c AdvertiseRoutes) applyTo(s *Snapshot) error {
	n, err := s.routerNode(c.NodeID)
	if err != nil {
		return err
	}
	want := slices.Clone(c.Prefixes)
	slices.SortFunc(want, netip.Prefix.Compare)
	if err := s.checkRequest(n, want, c.Rules); err != nil {
		return err
	}
	var next []Route
	for _, p := range want {
		r := Route{Prefix: p}
		if i := slices.IndexFunc(n.Routes, func(o Route) bool { return o.Prefix == p }); i >= 0 {
			r = n.Routes[i]
		}
		next = append(next, r)
	}
	if slices.Equal(next, n.Routes) {
		return nil
	}
	touched := prefixesOf(n.Routes, next)
	n.Routes, n.Updated = next, c.At
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: codes.EventRoutesRequested, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: "asks to carry " + prefixList(want)})
	s.settleCarriers(touched, c.At, c.Actor)
	return nil
}

func (c ApproveRoute) applyTo(s *Snapshot) error {
	n, err := s.routerNode(c.NodeID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(n.Routes, func(r Route) bool { return r.Prefix == c.Prefix })
	if i < 0 {
		return codes.Wrap(codes.RouteNotRequested, fmt.Errorf("node %s has not asked to carry %s (it asks for %s)", n.Name, c.Prefix, prefixList(prefixesOf(n.Routes))))
	}
	if n.Routes[i].Approved {
		return nil
	}
	if err := s.checkApproval(n, c.Prefix, c.Rules); err != nil {
		return err
	}
	routes := slices.Clone(n.Routes)
	routes[i].Approved, routes[i].ApprovedAt, routes[i].ApprovedBy = true, c.At, c.Actor
	n.Routes, n.Updated = routes, c.At
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: codes.EventRouteApproved, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("approved to carry %s", c.Prefix)})
	s.settleCarriers([]netip.Prefix{c.Prefix}, c.At, c.Actor)
	return nil
}

func (c WithdrawRoute) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", c.NodeID))
	}
	i := slices.IndexFunc(n.Routes, func(r Route) bool { return r.Prefix == c.Prefix })
	if i < 0 || !n.Routes[i].Approved {
		return codes.Wrap(codes.RouteNotRequested, fmt.Errorf("node %s is not approved to carry %s", n.Name, c.Prefix))
	}
	routes := slices.Clone(n.Routes)
	routes[i] = Route{Prefix: c.Prefix}
	n.Routes, n.Updated = routes, c.At
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: codes.EventRouteWithdrawn, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("no longer approved to carry %s", c.Prefix)})
	s.settleCarriers([]netip.Prefix{c.Prefix}, c.At, c.Actor)
	return nil
}

func (c SetCarrier) applyTo(s *Snapshot) error {
	if c.Prefix == ExitPrefix {
		return codes.Wrap(codes.BadRequest, errors.New("an exit node's default route has no carrier: each member picks its exit node"))
	}
	to, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", c.NodeID))
	}
	if !eligible(to, c.Prefix) {
		return codes.Wrap(codes.RouteNotRequested, fmt.Errorf("node %s is not an active router approved for %s", to.Name, c.Prefix))
	}
	now := s.carrierOf(c.Prefix)
	if now != c.From {
		return codes.Wrap(codes.CarrierChanged, fmt.Errorf("%s is carried by %q now, not %q", c.Prefix, s.nameOf(now), s.nameOf(c.From)))
	}
	if now == to.ID {
		return nil
	}
	s.setCarrier(c.Prefix, to.ID)
	s.audit(AuditEvent{Code: codes.EventCarrierMoved, At: c.At, Actor: c.Actor, Subject: to.Name,
		Detail: fmt.Sprintf("carries %s now, instead of %s (%s)", c.Prefix, s.nameOf(now), cmp.Or(c.Reason, "told"))})
	return nil
}

// routerNode is the active node id names: only a member's routes are
// asked for or approved.
func (s *Snapshot) routerNode(id string) (Node, error) {
	n, ok := s.Nodes[id]
	if !ok {
		return Node{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", id))
	}
	if n.State != NodeActive {
		return Node{}, codes.Wrap(codes.RouteBad, fmt.Errorf("node %s is %s; only an active member carries routes", n.Name, n.State))
	}
	return n, nil
}

// eligible reports whether n may carry p: active, with p approved.
func eligible(n Node, p netip.Prefix) bool {
	return n.State == NodeActive && slices.ContainsFunc(n.Routes, func(r Route) bool { return r.Prefix == p && r.Approved })
}

// carrierOf is the id of the node carrying p ("" for none).
func (s *Snapshot) carrierOf(p netip.Prefix) string {
	for _, n := range s.Nodes {
		for _, r := range n.Routes {
			if r.Prefix == p && r.Carrier {
				return n.ID
			}
		}
	}
	return ""
}

// setCarrier makes id the only carrier of p.
func (s *Snapshot) setCarrier(p netip.Prefix, id string) {
	for _, n := range s.Nodes {
		i := slices.IndexFunc(n.Routes, func(r Route) bool { return r.Prefix == p })
		if i < 0 || n.Routes[i].Carrier == (n.ID == id) {
			continue
		}
		routes := slices.Clone(n.Routes)
		routes[i].Carrier = n.ID == id
		n.Routes = routes
		s.Nodes[n.ID] = n
	}
}

// settleCarriers makes each of prefixes carried by exactly one eligible
// node when there is one: a carrier still eligible keeps it; otherwise
// the eligible node approved first (then by name) takes it, and the
// audit log says so.
func (s *Snapshot) settleCarriers(prefixes []netip.Prefix, at time.Time, actor string) {
	for _, p := range prefixes {
		if p == ExitPrefix {
			continue
		}
		now := s.carrierOf(p)
		if n, ok := s.Nodes[now]; ok && eligible(n, p) {
			s.setCarrier(p, now) // drops any second carrier
			continue
		}
		var best Node
		var bestAt time.Time
		for _, n := range s.Nodes {
			if !eligible(n, p) {
				continue
			}
			r := n.Routes[slices.IndexFunc(n.Routes, func(r Route) bool { return r.Prefix == p })]
			if best.ID == "" || r.ApprovedAt.Before(bestAt) || (r.ApprovedAt.Equal(bestAt) && n.Name < best.Name) {
				best, bestAt = n, r.ApprovedAt
			}
		}
		s.setCarrier(p, best.ID)
		if best.ID != now {
			detail := fmt.Sprintf("%s has no carrier", p)
			if best.ID != "" {
				detail = fmt.Sprintf("carries %s now", p)
			}
			if now != "" {
				detail += fmt.Sprintf(" (%s may no longer carry it)", s.nameOf(now))
			}
			s.audit(AuditEvent{Code: codes.EventCarrierMoved, At: at, Actor: actor, Subject: s.nameOf(cmp.Or(best.ID, now)), Detail: detail})
		}
	}
}

// settleNodeCarriers settles the prefixes node id asks for: its state
// changed (a removal, a leave, a failed join, a forget).
func (s *Snapshot) settleNodeCarriers(routes []Route, at time.Time, actor string) {
	if len(routes) > 0 {
		s.settleCarriers(prefixesOf(routes), at, actor)
	}
}

func (s *Snapshot) nameOf(id string) string {
	if n, ok := s.Nodes[id]; ok {
		return n.Name
	}
	if id == "" {
		return "nobody"
	}
	return id
}

// prefixesOf lists the prefixes of every route given, each once, sorted.
func prefixesOf(lists ...[]Route) []netip.Prefix {
	var out []netip.Prefix
	for _, l := range lists {
		for _, r := range l {
			out = append(out, r.Prefix)
		}
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}

func prefixList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "nothing"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
