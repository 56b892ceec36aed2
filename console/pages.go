package console

import (
	"context"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/codes"
)

// callTimeout bounds every local API call a page makes; removeTimeout a
// removal, which waits up to revocation_ack_timeout (at most 1m) for the
// members' acknowledgements.
const (
	callTimeout   = 10 * time.Second
	removeTimeout = 75 * time.Second
)

// pages renders the console's pages from the local API.
type pages struct {
	client    *localclient.Client
	templates map[string]*template.Template
}

func newPages(client *localclient.Client) (*pages, error) {
	ts, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	return &pages{client: client, templates: ts}, nil
}

func (p *pages) routes(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets/static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", p.mesh)
	mux.HandleFunc("GET /live/mesh", p.meshLive)
	mux.HandleFunc("GET /node/{name}", p.node)
	mux.HandleFunc("POST /node/{name}/remove", p.remove)
	mux.HandleFunc("GET /admit", p.admitForm)
	mux.HandleFunc("POST /admit", p.admit)
	mux.HandleFunc("GET /tokens", p.tokens)
	mux.HandleFunc("POST /tokens/revoke", p.revoke)
	mux.HandleFunc("GET /approvals", p.approvals)
	mux.HandleFunc("POST /approvals/approve", p.approve)
	mux.HandleFunc("POST /approvals/reject", p.reject)
	mux.HandleFunc("GET /audit", p.audit)
	mux.HandleFunc("/", p.notFound)
}

// notFound answers every path and method no route takes, in the layout and
// with a code like every other failure.
func (p *pages) notFound(w http.ResponseWriter, r *http.Request) {
	p.render(w, http.StatusNotFound, "refused", view{Title: "Not found", CSRF: csrfOf(r.Context()),
		Problem: problemOf(codes.Wrap(codes.ConsolePage, fmt.Errorf("%s %s", r.Method, r.URL.Path)))})
}

func (p *pages) call(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), callTimeout)
}

// meshView is the Mesh page: the picture and the table of the same nodes.
// Its Problem is part of the live fragment, so a refresh shows a failure
// that comes later (meshd stopped) and clears one that went away.
type meshView struct {
	Problem *problem
	Status  *apitype.Status
	Nodes   []nodeRow
	Picture *picture
	Count   map[string]int // nodes by condition
	// Filter is the table's filter (filter.go), Shown the rows that
	// match it, Live the live fragment's URL with the same filter.
	Filter string
	Shown  []nodeRow
	Live   string
}

// nodeRow is a node as the pages show it.
type nodeRow struct {
	apitype.Node
	Lighthouse bool
	Condition  string // ok, warn, down, gone: the picture's and the table's colour
	// Tunnels is what the cluster-wide view says of the node: how many
	// tunnels it reported, or why it has no report; empty without a view.
	Tunnels string
}

func (p *pages) mesh(w http.ResponseWriter, r *http.Request) {
	p.render(w, http.StatusOK, "mesh", view{Title: "Mesh", Nav: "mesh", CSRF: csrfOf(r.Context()), Data: p.meshData(r)})
}

// meshLive is the Mesh page's live part alone, for console.js.
func (p *pages) meshLive(w http.ResponseWriter, r *http.Request) {
	p.renderFragment(w, "mesh", "live", view{Data: p.meshData(r)})
}

func (p *pages) meshData(r *http.Request) meshView {
	ctx, cancel := p.call(r)
	defer cancel()
	q := filterQuery(r.URL.Query())
	st, err := p.client.Status(ctx)
	if err != nil {
		return meshView{Problem: problemOf(err), Filter: q, Live: liveURL(q)}
	}
	nodes, err := p.client.Nodes(ctx)
	rows := rowsOf(st, nodes)
	count := map[string]int{}
	for _, n := range rows {
		count[n.Condition]++
	}
	tm, mapErr := p.tunnelMap(ctx, st)
	withTunnels(rows, tm)
	pic := draw(st, rows, tm)
	pic.MapProblem = problemOf(mapErr)
	return meshView{Problem: problemOf(err), Status: st, Nodes: rows, Picture: pic, Count: count,
		Filter: q, Shown: filterNodes(rows, q), Live: liveURL(q)}
}

// tunnelMap is the cluster-wide tunnel view when the console talks to a
// control node (a worker has none: nil, nil); a failure comes back with a
// nil view, and the pages fall back to the asked node's tunnels.
func (p *pages) tunnelMap(ctx context.Context, st *apitype.Status) (*apitype.TunnelMap, error) {
	if st == nil || st.Role != "control" {
		return nil, nil
	}
	tm, err := p.client.Tunnels(ctx)
	if err != nil {
		return nil, err
	}
	return &tm, nil
}

// withTunnels fills each row's Tunnels from tm.
func withTunnels(rows []nodeRow, tm *apitype.TunnelMap) {
	if tm == nil {
		return
	}
	by := map[string]apitype.TunnelNode{}
	for _, n := range tm.Nodes {
		by[n.Name] = n
	}
	for i := range rows {
		n, ok := by[rows[i].Name]
		switch {
		case !ok:
		case n.Reported:
			rows[i].Tunnels = strconv.Itoa(n.Tunnels)
		default:
			rows[i].Tunnels = n.Problem
		}
	}
}

// rowsOf marks the lighthouses: those the asked node knows
// (status.overlay.lighthouses, the others) and the asked node itself when it
// is one (status.overlay.lighthouse: meshd does not list a lighthouse among
// its own lighthouses).
func rowsOf(st *apitype.Status, nodes []apitype.Node) []nodeRow {
	var lighthouses []string
	self := ""
	if st != nil && st.Overlay != nil {
		lighthouses = st.Overlay.Lighthouses
		if st.Overlay.Lighthouse {
			self = st.Node
		}
	}
	rows := make([]nodeRow, 0, len(nodes))
	for _, n := range nodes {
		lh := slices.Contains(lighthouses, n.OverlayIP) || self != "" && n.Name == self
		rows = append(rows, nodeRow{Node: n, Lighthouse: lh, Condition: condition(n)})
	}
	slices.SortFunc(rows, func(a, b nodeRow) int { return strings.Compare(a.Name, b.Name) })
	return rows
}

// condition sums up a node for its colour: ok (active and alive; a stock
// Nebula member, which does not gossip, active), gone (left or removed),
// down (failed in raft or in gossip), warn (anything between: joining,
// suspect, not yet seen by gossip).
func condition(n apitype.Node) string {
	switch {
	case n.State == "left" || n.State == "removed":
		return "gone"
	case n.State == "failed" || n.Gossip == "failed":
		return "down"
	case n.State == "active" && (n.Gossip == "alive" || n.Role == "nebula"):
		return "ok"
	}
	return "warn"
}

// nodeView is the Node page.
type nodeView struct {
	Node   nodeRow
	Status *apitype.Status // set when the node is the one the console talks to
	// Removable: the console talks to a control node, and the node is
	// neither that node nor gone; the page offers remove.
	Removable bool
	Removed   *apitype.RemoveResponse
	// Tunnels are the node's tunnels from the cluster-wide view (nil
	// without one: then only the node asked shows its own, in Status).
	Tunnels []nodeTunnel
	// TunnelView: the view was there (an empty Tunnels means none).
	TunnelView bool
}

// nodeTunnel is one tunnel of a node on its page: the peer, the path each
// end sends over, and which ends reported it.
type nodeTunnel struct {
	Peer, Here, There string
	OneSided          bool
	SeenFrom          []string
}

func (p *pages) node(w http.ResponseWriter, r *http.Request) {
	p.renderNode(w, r, http.StatusOK, nil, nil)
}

// renderNode shows the Node page, after a removal (removed) or a refused
// one (failed) when there was one.
func (p *pages) renderNode(w http.ResponseWriter, r *http.Request, status int, removed *apitype.RemoveResponse, failed error) {
	ctx, cancel := p.call(r)
	defer cancel()
	name := r.PathValue("name")
	v := view{Title: "Node " + name, Nav: "mesh", CSRF: csrfOf(r.Context()), Problem: problemOf(failed)}
	st, err := p.client.Status(ctx)
	if err != nil {
		v.Problem = problemOf(err)
		p.render(w, http.StatusOK, "node", v)
		return
	}
	nodes, err := p.client.Nodes(ctx)
	if err != nil {
		v.Problem = problemOf(err)
		p.render(w, http.StatusOK, "node", v)
		return
	}
	for _, n := range rowsOf(st, nodes) {
		if n.Name == name {
			nv := nodeView{Node: n, Removed: removed,
				Removable: st.Role == "control" && !n.Self && n.Condition != "gone"}
			if n.Self {
				nv.Status = st
			}
			if tm, err := p.tunnelMap(ctx, st); err == nil && tm != nil {
				nv.TunnelView, nv.Tunnels = true, tunnelsOf(tm, name)
			}
			v.Data = nv
			p.render(w, status, "node", v)
			return
		}
	}
	if v.Problem == nil {
		v.Problem = problemOf(codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node %q", name)))
		status = http.StatusNotFound
	}
	p.render(w, status, "node", v)
}

// remove takes the node out of the cluster, as `meshctl remove NAME`, once
// the operator has typed its name into the confirm field.
func (p *pages) remove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if r.PostForm.Get("confirm") != name {
		p.renderNode(w, r, http.StatusBadRequest, nil,
			codes.Wrap(codes.ConsoleForm, fmt.Errorf("confirm: type the node's name, %s, to remove it", name)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), removeTimeout)
	defer cancel()
	resp, err := p.client.RemoveWait(ctx, name, 0)
	if err != nil {
		p.renderNode(w, r, codes.OrInternal(err).Status(), nil, err)
		return
	}
	p.renderNode(w, r, http.StatusOK, resp, nil)
}

// admitFormView is the Admit form's values (kept when a mint fails).
type admitFormView struct {
	Name, Role, TTL, Addr, Groups string
	Approve                       bool
}

func (p *pages) admitForm(w http.ResponseWriter, r *http.Request) {
	p.render(w, http.StatusOK, "admit", view{Title: "Admit", Nav: "admit", CSRF: csrfOf(r.Context()),
		Data: admitFormView{Role: "worker", TTL: "15m"}})
}

// admit mints a token and shows it on this answer only: the console keeps
// no copy, and no later page shows it.
func (p *pages) admit(w http.ResponseWriter, r *http.Request) {
	f := admitFormView{Name: strings.TrimSpace(r.PostForm.Get("name")), Role: r.PostForm.Get("role"),
		TTL: strings.TrimSpace(r.PostForm.Get("ttl")), Addr: strings.TrimSpace(r.PostForm.Get("addr")),
		Groups: r.PostForm.Get("groups"), Approve: r.PostForm.Get("approve") != ""}
	v := view{Title: "Admit", Nav: "admit", CSRF: csrfOf(r.Context()), Data: f}
	req, err := f.request()
	if err == nil {
		ctx, cancel := p.call(r)
		defer cancel()
		var resp *apitype.AdmitResponse
		if resp, err = p.client.Admit(ctx, req); err == nil {
			v.Data = resp
			p.render(w, http.StatusOK, "admitted", v)
			return
		}
	}
	v.Problem = problemOf(err)
	p.render(w, codes.OrInternal(err).Status(), "admit", v)
}

func (f admitFormView) request() (apitype.AdmitRequest, error) {
	req := apitype.AdmitRequest{Name: f.Name, Role: f.Role, Addr: f.Addr, Approve: f.Approve}
	if f.Name == "" {
		return req, codes.Wrap(codes.ConsoleForm, fmt.Errorf("name: required"))
	}
	ttl, err := time.ParseDuration(f.TTL)
	if err != nil {
		return req, codes.Wrap(codes.ConsoleForm, fmt.Errorf("ttl: want a duration such as 15m or 1h"))
	}
	req.TTL = ttl
	req.Groups = strings.FieldsFunc(f.Groups, func(r rune) bool { return r == ',' || r == ' ' })
	return req, nil
}

// names is the id → name map of the cluster's nodes; empty when the node
// list cannot be read (the page then shows the ids as they came).
func (p *pages) names(ctx context.Context) nodeNames {
	nodes, err := p.client.Nodes(ctx)
	if err != nil {
		return nodeNames{}
	}
	return namesOf(nodes)
}

// tunnelsOf is node name's tunnels in tm, by peer.
func tunnelsOf(tm *apitype.TunnelMap, name string) []nodeTunnel {
	out := []nodeTunnel{}
	for _, e := range tm.Edges {
		peer := ""
		switch name {
		case e.A:
			peer = e.B
		case e.B:
			peer = e.A
		default:
			continue
		}
		t := nodeTunnel{Peer: peer, OneSided: len(e.SeenFrom) < 2, SeenFrom: e.SeenFrom, Here: "not reported", There: "not reported"}
		for _, p := range e.Paths {
			if p.From == name {
				t.Here = pathText(p)
			} else {
				t.There = pathText(p)
			}
		}
		out = append(out, t)
	}
	return out
}
