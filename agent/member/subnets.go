package member

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/hostroute"
	"github.com/meshd/meshd/pki"
)

// A member's part of routes and exit nodes (issue 33): it asks for the
// prefixes it would carry (AdvertiseRoutes), its Nebula points each
// prefix another node carries at that node (desired.Routes, in the
// overlay config), and its kernel does the rest (hostroute): a router
// forwards and masquerades overlay traffic into the prefixes it is
// approved for, carrier or standby, so a failover needs nothing of it; a
// member using an exit node sends its default route into the tunnel, with
// Nebula's own packets (marked exitMark) and the paths to lighthouses,
// static hosts and seeds kept off it. In userspace mode there is no
// kernel to route through: a router or exit there forwards nothing, and
// says so in status.

// The exit routing's kernel names: the fwmark Nebula's socket carries
// while an exit node is in use, the routing table and the first of the
// two rule priorities meshd owns (below main's 32766).
const (
	exitMark     = 0x6d657368 // "mesh"
	exitTable    = 52742
	exitPriority = 5274
)

// subnets is the kernel side: what it applied, and the exit node chosen.
type subnets struct {
	host     *hostroute.Host
	stateDir string
	tunDev   string
	overlay  netip.Prefix
	kernel   bool // a kernel TUN device: forwarding and exit routing apply

	mu       sync.Mutex
	exitName string // the exit node chosen ("" none), as ExitFile holds it
	routed   []netip.Prefix
	fwdErr   error
	exit     *hostroute.Exit // the exit routing applied, nil none
	exitVia  netip.Addr
	exitErr  error
	applied  chan struct{} // closed and replaced after each apply
}

func newSubnets(stateDir, tunDev string, overlay netip.Prefix, kernel bool) (*subnets, error) {
	name, err := statedir.LoadExit(stateDir)
	if err != nil {
		return nil, err
	}
	return &subnets{host: hostroute.New(), stateDir: stateDir, tunDev: tunDev, overlay: overlay.Masked(), kernel: kernel,
		exitName: name, applied: make(chan struct{})}, nil
}

// exitChoice is the exit node chosen, for desired.Inputs.Exit.
func (nd *node) exitChoice() string {
	if nd.subnets == nil {
		return ""
	}
	s := nd.subnets
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitName
}

// apply brings the kernel in line with what this node carries (its own
// approved prefixes) and the exit route r holds. Each part is applied
// only when it changed or failed last time.
func (s *subnets) apply(own []netip.Prefix, r desired.Routed, log func(msg string, args ...any)) {
	s.mu.Lock()
	defer func() {
		close(s.applied)
		s.applied = make(chan struct{})
		s.mu.Unlock()
	}()
	if !s.kernel {
		if len(own) > 0 || r.ExitChosen {
			s.fwdErr = errors.New("userspace mode has no kernel to route through")
		}
		return
	}
	if !slices.Equal(own, s.routed) || s.fwdErr != nil {
		err := s.host.ApplyForward(hostroute.Forward{TunDev: s.tunDev, Overlay: s.overlay, Routed: own})
		if err != nil && !slices.Equal(own, s.routed) {
			log("routes: forwarding not applied", "code", codes.OrInternal(err), "err", err)
		}
		s.routed, s.fwdErr = slices.Clone(own), err
	}
	var want *hostroute.Exit
	if r.ExitChosen {
		want = &hostroute.Exit{TunDev: s.tunDev, Mark: exitMark, Table: exitTable, Priority: exitPriority, Exclude: r.Excluded}
	}
	switch {
	case want == nil && s.exit != nil:
		err := s.host.ExitOff(*s.exit)
		if err != nil {
			log("exit routing not removed", "code", codes.OrInternal(err), "err", err)
		}
		s.exit, s.exitVia, s.exitErr = nil, netip.Addr{}, err
	case want != nil && (s.exit == nil || !sameExit(*want, *s.exit) || s.exitErr != nil):
		err := s.host.UseExit(*want)
		if err != nil {
			log("exit routing not applied", "code", codes.OrInternal(err), "err", err)
		}
		s.exit, s.exitErr = want, err
	}
	s.exitVia = r.Exit
}

func sameExit(a, b hostroute.Exit) bool {
	return a.TunDev == b.TunDev && a.Mark == b.Mark && a.Table == b.Table && a.Priority == b.Priority && slices.Equal(a.Exclude, b.Exclude)
}

// stop undoes what apply did: the exit routing and the forwarding.
func (s *subnets) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exit != nil {
		_ = s.host.ExitOff(*s.exit)
		s.exit = nil
	}
	if s.routed != nil {
		_ = s.host.RemoveForward()
		s.routed = nil
	}
}

// state is the exit node as status shows it (nil when none is chosen).
func (s *subnets) state(approved bool) *apitype.ExitState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exitName == "" {
		return nil
	}
	st := &apitype.ExitState{Node: s.exitName}
	switch {
	case !approved:
		st.Error = fmt.Sprintf("%s is not an active, approved exit node: traffic for the default route is dropped (not sent on the underlay) "+
			"until it is again, another is chosen (meshctl exit use NODE) or meshctl exit off", s.exitName)
	case s.exitErr != nil:
		st.Error = s.exitErr.Error()
	case !s.kernel:
		st.Error = "userspace mode has no kernel to route through"
	}
	if s.exitVia.IsValid() {
		st.Via = s.exitVia.String()
	}
	return st
}

// ownRoutes are the prefixes this node's record is approved to carry,
// and those it asks for, approved or not.
func (nd *node) ownRoutes() (approved, asked []netip.Prefix) {
	if r, ok := nd.cluster.Record(nd.facts.NodeID); ok { // O(1) on a worker: read on every overlay pass
		for _, rt := range r.Routes {
			p, err := netip.ParsePrefix(rt.Prefix)
			if err != nil {
				continue
			}
			asked = append(asked, p)
			if rt.Approved {
				approved = append(approved, p)
			}
		}
		slices.SortFunc(approved, netip.Prefix.Compare)
		return approved, asked
	}
	return nil, nil
}

// recordRoutes are a record's approved routes as desired reads them.
func recordRoutes(rs []apitype.NodeRoute) []desired.RecordRoute {
	var out []desired.RecordRoute
	for _, r := range rs {
		p, err := netip.ParsePrefix(r.Prefix)
		if err != nil || !r.Approved {
			continue
		}
		out = append(out, desired.RecordRoute{Prefix: p, Carrier: r.Carrier, Exit: r.Exit})
	}
	return out
}

// AdvertiseRoutes asks the cluster to let this node carry the prefixes
// in req (`meshctl routes advertise`), replacing what it asked before.
func (rt *Runtime) AdvertiseRoutes(ctx context.Context, req apitype.AdvertiseRequest) error {
	var ps []netip.Prefix
	for _, s := range req.Prefixes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return codes.Wrap(codes.RouteBad, fmt.Errorf("%q is not a prefix such as 192.168.50.0/24", s))
		}
		ps = append(ps, p)
	}
	if req.Exit {
		ps = append(ps, netip.MustParsePrefix("0.0.0.0/0"))
	}
	if rt.ctl != nil {
		return rt.ctl.AdvertiseOwn(ctx, ps)
	}
	return rt.client.PostSeeds(ctx, rt.seeds(), control.PathSelfRoutes, control.SelfRoutesRequest{Prefixes: ps}, nil)
}

// RouteList is `meshctl routes list`: every prefix on record and this
// node's exit node.
func (rt *Runtime) RouteList() apitype.Routes {
	recs, _ := rt.cluster.Records()
	nodes := make([]apitype.Node, len(recs))
	for i, r := range recs {
		nodes[i] = r.Node
	}
	view := map[string]string{rt.facts.Name: string(gossip.StatusAlive)}
	if src := rt.peers(); src != nil { // liveness.go
		for _, m := range src.Members() {
			if m.Name != rt.facts.Name {
				view[m.Name] = string(m.Status)
			}
		}
	}
	if rt.ctl != nil {
		// A control node's gossip lacks the workers out of the pool (the
		// default): the control plane judges them by their records.
		for name, st := range rt.ctl.GossipView() { // control/outofpool.go
			if _, ok := view[name]; !ok {
				view[name] = st
			}
		}
	}
	out := apitype.Routes{Routes: control.RouteRows(nodes, view)}
	if out.Routes == nil {
		out.Routes = []apitype.RouteRow{}
	}
	out.Exit = rt.subnets.state(rt.exitApproved(rt.exitChoice()))
	return out
}

// exitApproved reports whether name is another active node approved as
// an exit node.
func (nd *node) exitApproved(name string) bool {
	if name == "" || name == nd.facts.Name {
		return false
	}
	recs, _ := nd.cluster.Records()
	for _, r := range recs {
		if r.Name == name && r.Active() {
			return slices.ContainsFunc(r.Routes, func(x apitype.NodeRoute) bool { return x.Exit && x.Approved })
		}
	}
	return false
}

// exitSettle bounds how long UseExit waits for the overlay loop to apply
// the choice.
const exitSettle = 10 * time.Second

// UseExit makes name this node's exit node ("" turns it off: `meshctl
// exit off`), records the choice in the state dir, and waits until the
// overlay loop applied it.
func (rt *Runtime) UseExit(ctx context.Context, name string) (*apitype.ExitState, error) {
	if name != "" && !rt.exitApproved(name) {
		return nil, codes.Wrap(codes.ExitNotApproved, fmt.Errorf("%q is not another active node approved as an exit node", name))
	}
	s := rt.subnets
	s.mu.Lock()
	if err := statedir.SaveExit(rt.stateDir, name); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.exitName = name
	wait := s.applied
	s.mu.Unlock()
	rt.poke()
	ctx, cancel := context.WithTimeout(ctx, exitSettle)
	defer cancel()
	select {
	case <-wait:
	case <-ctx.Done():
	}
	st := s.state(rt.exitApproved(name))
	if st != nil && st.Error != "" {
		return st, codes.Wrap(codes.HostRouteApply, errors.New(st.Error))
	}
	return st, nil
}

// seedAddrs are the underlay addresses of the control nodes this node
// asks: the exit routing keeps them off the tunnel.
func (nd *node) seedAddrs() []netip.Addr {
	var out []netip.Addr
	for _, s := range nd.seeds() {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			out = append(out, ap.Addr().Unmap())
		}
	}
	return out
}

// routesReissued reports whether raft records a Nebula certificate for
// this node that holds other prefixes than certPEM, its own: an approval
// or a withdrawal reissued it, and the node fetches it now.
func (nd *node) routesReissued(certPEM []byte) bool {
	own, ok := nd.cluster.Record(nd.facts.NodeID)
	if !ok {
		return false
	}
	mine, err := pki.NebulaRoutes(certPEM)
	if err != nil {
		return false
	}
	held := make([]string, len(mine))
	for j, p := range mine {
		held[j] = p.String()
	}
	return !slices.Equal(held, own.NebulaRoutes)
}
