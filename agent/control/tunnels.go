package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// The cluster-wide tunnel view (issue 15): which node reaches which, over
// which underlay path. A control node reports its own tunnels; a worker
// cannot answer on 7300 (its TLS leaf is a client leaf only), so it pushes
// its tunnels to a control node (POST PathSelfTunnels when they changed,
// at most once every TunnelReportEvery, else every TunnelReportMax), which
// keeps them in memory and passes them on in GET PathTunnels.
const (
	PathTunnels     = "/v1/tunnels"
	PathSelfTunnels = "/v1/self/tunnels"

	// TunnelReportEvery is the least time between two reports of a
	// worker (it reports when its tunnels change); TunnelReportMax is the longest it
	// goes without a report; a report older than TunnelReportTTL is
	// dropped (the worker stopped reporting).
	TunnelReportEvery = 2 * time.Second
	TunnelReportMax   = 30 * time.Second
	TunnelReportTTL   = 3 * TunnelReportMax

	// tunnelAskEach bounds the question to one control node; tunnelAskAll
	// the whole view.
	tunnelAskEach = 2 * time.Second
	tunnelAskAll  = 3 * time.Second
	// maxReportedTunnels caps one report (a node has a tunnel per peer at
	// most: more than this is not a node of this mesh talking).
	maxReportedTunnels = 100000
)

// TunnelsRequest is a member's own tunnels, POSTed to PathSelfTunnels,
// and the members it cannot reach over the overlay by its own probes
// (pair health, pairhealth.go; a release before it sends none).
type TunnelsRequest struct {
	Tunnels     []apitype.Tunnel `json:"tunnels"`
	Unreachable []string         `json:"unreachable,omitempty"`
}

// TunnelReport is one node's established tunnels, as it last reported them.
type TunnelReport struct {
	NodeID      string           `json:"node_id"`
	Name        string           `json:"name"`
	At          time.Time        `json:"at"`
	Tunnels     []apitype.Tunnel `json:"tunnels"`
	Unreachable []string         `json:"unreachable,omitempty"` // the members it cannot reach (pairhealth.go)
}

// TunnelReports answers GET PathTunnels: this control node's tunnels and
// the workers' reports it holds.
type TunnelReports struct {
	Reports []TunnelReport `json:"reports"`
}

// tunnelStore holds the workers' reports this control node received.
type tunnelStore struct {
	mu sync.Mutex
	by map[string]TunnelReport // by node id
}

func (s *tunnelStore) put(r TunnelReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string]TunnelReport{}
	}
	s.by[r.NodeID] = r
}

// fresh is every report received after since, oldest dropped.
func (s *tunnelStore) fresh(since time.Time) []TunnelReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TunnelReport
	for id, r := range s.by {
		if r.At.Before(since) {
			delete(s.by, id)
			continue
		}
		out = append(out, r)
	}
	return out
}

// handleSelfTunnels keeps the caller's report; who it is comes from its
// leaf (the guard), never from the body.
func (p *Plane) handleSelfTunnels(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := p.reports.passRequest(r, c); err != nil {
		writeError(w, err)
		return
	}
	var req TunnelsRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Tunnels) > maxReportedTunnels || len(req.Unreachable) > maxReportedTunnels {
		writeError(w, codes.Wrap(codes.BadRequest, errors.New("too many tunnels in one report")))
		return
	}
	tunnels, err := p.checkedTunnels(req.Tunnels)
	if err != nil {
		writeError(w, err)
		return
	}
	p.tunnels.put(TunnelReport{NodeID: c.NodeID, Name: c.Name, At: p.now(), Tunnels: tunnels,
		Unreachable: p.checkedUnreachable(c.Name, req.Unreachable)})
	apitype.WriteJSON(w, http.StatusOK, struct{}{})
}

// checkedTunnels is what a worker's report may add to the tunnel view
// (issue 27 item 10: a report could invent edges to nodes that do not
// exist, with free text as the remote). A remote must be an address and
// port, or empty on a relayed tunnel: anything else refuses the report
// (BadRequest; meshd never sends it). A tunnel to a name that is not an
// active or joining node at the overlay IP its record holds is dropped
// (Nebula keeps a removed peer's tunnel until it times out, so an honest
// report may hold one for a while).
func (p *Plane) checkedTunnels(in []apitype.Tunnel) ([]apitype.Tunnel, error) {
	out := []apitype.Tunnel{}
	for _, t := range in {
		if t.Relayed && t.Remote != "" {
			if _, err := netip.ParseAddrPort(t.Remote); err != nil {
				t.Remote = "" // a relayed tunnel has no remote of its own
			}
		}
		if !t.Relayed {
			if _, err := netip.ParseAddrPort(t.Remote); err != nil {
				return nil, codes.Wrap(codes.BadRequest, fmt.Errorf("tunnel to %q: remote is not an address and port", t.Name))
			}
		}
		n, ok := p.raft.FSM().NodeByName(t.Name)
		if !ok || (n.State != state.NodeActive && n.State != state.NodeJoining) || !n.OverlayIP.IsValid() ||
			n.OverlayIP.String() != t.OverlayIP {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// handleTunnels answers this node's tunnels and the fresh reports of
// active members it holds.
func (p *Plane) handleTunnels(w http.ResponseWriter, _ *http.Request, _ Caller) {
	apitype.WriteJSON(w, http.StatusOK, p.localTunnels())
}

func (p *Plane) localTunnels() TunnelReports {
	out := TunnelReports{Reports: []TunnelReport{}}
	now := p.now()
	self := p.nameOf(p.cfg.NodeID)
	out.Reports = append(out.Reports, TunnelReport{NodeID: p.cfg.NodeID, Name: self, At: now,
		Tunnels: orEmpty(p.hooks.Tunnels()), Unreachable: p.checkedUnreachable(self, p.ownUnreachable())})
	for _, r := range p.tunnels.fresh(now.Add(-TunnelReportTTL)) {
		if n, ok := p.raft.FSM().Node(r.NodeID); ok && n.State == state.NodeActive {
			out.Reports = append(out.Reports, r)
		}
	}
	return out
}

func orEmpty(t []apitype.Tunnel) []apitype.Tunnel {
	if t == nil {
		return []apitype.Tunnel{}
	}
	return t
}

// TunnelMap is the cluster-wide tunnel view `GET /v0/tunnels` answers:
// every active control node asked at once (tunnelAskEach each,
// tunnelAskAll in all; this node answers for itself), the newest report
// of each node kept, merged into edges. A node gossip does not show alive
// or suspect has its report and the tunnels to it dropped (a killed
// node's edges go); every
// active node without a report is named with why.
func (p *Plane) TunnelMap(ctx context.Context) apitype.TunnelMap {
	return p.tunnelMap(ctx, tunnelAskEach, tunnelAskAll)
}

// tunnelMap is TunnelMap with each control node asked within each, all
// of them within all.
func (p *Plane) tunnelMap(ctx context.Context, each, all time.Duration) apitype.TunnelMap {
	ctx, cancel := context.WithTimeout(ctx, all)
	defer cancel()
	fsm := p.raft.FSM()
	var active []state.Node
	for _, n := range fsm.Nodes() {
		if n.State == state.NodeActive {
			active = append(active, n)
		}
	}
	var (
		mu      sync.Mutex
		reports []TunnelReport
		failed  = map[string]string{} // control node name → why it did not answer
		wg      sync.WaitGroup
	)
	for _, n := range active {
		if n.Role != pki.RoleControl {
			continue
		}
		if n.ID == p.cfg.NodeID {
			mu.Lock()
			reports = append(reports, p.localTunnels().Reports...)
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got TunnelReports
			err := errors.New("no control address on record")
			if n.EnrollAddr != "" {
				cctx, cancel := context.WithTimeout(ctx, each)
				err = p.client.Call(cctx, n.EnrollAddr, PathTunnels, true, nil, &got)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[n.Name] = "no answer: " + err.Error()
				return
			}
			reports = append(reports, got.Reports...)
		}()
	}
	wg.Wait()
	return mergeTunnels(active, reports, failed, p.gossipView()) // outofpool.go
}

// mergeTunnels builds the view from the reports (newest per node wins),
// keeping only active nodes gossip shows alive or suspect and the tunnels
// to them (gossip nil: unknown, all kept), and the broken pairs among
// them (brokenPairs).
func mergeTunnels(active []state.Node, reports []TunnelReport, failed map[string]string, gossip map[string]string) apitype.TunnelMap {
	newest := map[string]TunnelReport{}
	for _, r := range reports {
		if o, ok := newest[r.NodeID]; !ok || r.At.After(o.At) {
			newest[r.NodeID] = r
		}
	}
	// A node gossip has seen die: its report is dropped, and so are the
	// tunnels others still report to it (Nebula keeps a dead peer's
	// tunnel until it times out).
	down := map[string]bool{}
	for name, g := range gossip {
		if g != "alive" && g != "suspect" {
			down[name] = true
		}
	}
	names := map[string]bool{} // edges go only to active nodes, whatever a report names
	for _, n := range active {
		names[n.Name] = true
	}
	m := apitype.TunnelMap{Edges: []apitype.TunnelEdge{}, Nodes: []apitype.TunnelNode{}}
	edges := map[[2]string]*apitype.TunnelEdge{}
	for _, n := range active {
		tn := apitype.TunnelNode{Name: n.Name, Role: string(n.Role)}
		r, ok := newest[n.ID]
		g, known := gossip[n.Name]
		switch {
		case gossip != nil && known && g != "alive" && g != "suspect":
			tn.Problem = "gossip: " + g
		case gossip != nil && !known:
			tn.Problem = "gossip: not a member"
		case ok:
			tn.Reported, tn.ReportedAt = true, r.At
			tn.Unreachable = liveNames(r.Unreachable, n.Name, names, down)
			for _, t := range r.Tunnels {
				if t.Name == "" || t.Name == n.Name || down[t.Name] || !names[t.Name] {
					continue
				}
				a, b := n.Name, t.Name
				if b < a {
					a, b = b, a
				}
				e := edges[[2]string{a, b}]
				if e == nil {
					e = &apitype.TunnelEdge{A: a, B: b}
					edges[[2]string{a, b}] = e
				}
				tn.Tunnels++ // those drawn: not to itself, not to a dead node
				e.SeenFrom = append(e.SeenFrom, n.Name)
				e.Paths = append(e.Paths, apitype.TunnelPath{From: n.Name, Remote: t.Remote, Relayed: t.Relayed})
			}
		case failed[n.Name] != "":
			tn.Problem = failed[n.Name]
		case n.Role == pki.RoleControl:
			tn.Problem = "no answer"
		default:
			tn.Problem = "no answer: no control node that answered holds a report of it"
		}
		m.Nodes = append(m.Nodes, tn)
	}
	for _, e := range edges {
		slices.Sort(e.SeenFrom)
		slices.SortFunc(e.Paths, func(x, y apitype.TunnelPath) int { return cmp.Compare(x.From, y.From) })
		m.Edges = append(m.Edges, *e)
	}
	slices.SortFunc(m.Edges, func(x, y apitype.TunnelEdge) int {
		return cmp.Or(cmp.Compare(x.A, y.A), cmp.Compare(x.B, y.B))
	})
	slices.SortFunc(m.Nodes, func(x, y apitype.TunnelNode) int { return cmp.Compare(x.Name, y.Name) })
	m.Broken = brokenPairs(m.Nodes) // pairhealth.go
	return m
}
