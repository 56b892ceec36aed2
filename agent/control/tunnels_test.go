package control

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestTunnelMap: a worker reports its tunnels to one control node (c2);
// GET /v1/tunnels is refused to it (PeerRoleDenied) and answers a control
// node this node's tunnels plus the reports it holds; the view built on
// another control node (origin) asks c2 and merges both ends of each
// tunnel into one edge, and names the active node that reported nothing.
func TestTunnelMap(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	_, w1 := c.worker(t, origin, "w1")
	c.worker(t, origin, "w2")
	ctx := within(t, 20*time.Second)
	origin.hooks.mu.Lock()
	origin.hooks.tunnels = []apitype.Tunnel{{Name: "w1", OverlayIP: "10.42.0.11", Remote: "192.0.2.11:4242"}}
	origin.hooks.mu.Unlock()
	waitState(t, c2, "id-w2", state.NodeActive)

	report := TunnelsRequest{Tunnels: []apitype.Tunnel{
		{Name: "origin", OverlayIP: "10.42.0.1", Remote: "192.0.2.1:4242"},
		{Name: "w2", OverlayIP: "10.42.0.12", Relayed: true},
	}}
	if err := w1.Call(ctx, c2.addr, PathSelfTunnels, false, report, nil); err != nil {
		t.Fatalf("w1 reports its tunnels to c2: %v", err)
	}
	if err := w1.Call(ctx, c2.addr, PathTunnels, false, nil, nil); codes.Of(err) != codes.PeerRoleDenied {
		t.Fatalf("w1 reads the tunnels: %v, want %s", err, codes.PeerRoleDenied)
	}
	var held TunnelReports
	if err := origin.p.client.Call(ctx, c2.addr, PathTunnels, false, nil, &held); err != nil {
		t.Fatalf("origin reads c2's tunnels: %v", err)
	}
	if got := fmt.Sprint(reportNames(held)); got != "[c2 w1]" {
		t.Fatalf("c2 answers the reports of %s, want [c2 w1]", got)
	}

	m := origin.p.TunnelMap(ctx)
	want := "origin-w1 seen from [origin w1] via [origin→192.0.2.11:4242 w1→192.0.2.1:4242]; " +
		"w1-w2 seen from [w1] via [w1→relayed]; "
	if got := edgesText(m); got != want {
		t.Errorf("edges:\n got %s\nwant %s", got, want)
	}
	want = "c2:reported:0 origin:reported:1 w1:reported:2 w2:no answer: no control node that answered holds a report of it "
	if got := nodesText(m); got != want {
		t.Errorf("nodes:\n got %s\nwant %s", got, want)
	}
}

// TestMergeTunnels: a control node that did not answer is named with the
// error; a node gossip shows failed loses its report and the tunnels
// others report to it (a killed node's edges go); a report older than
// another copy of it loses.
func TestMergeTunnels(t *testing.T) {
	now := time.Now()
	active := []state.Node{
		{ID: "a", Name: "a", Role: pki.RoleControl}, {ID: "b", Name: "b", Role: pki.RoleControl},
		{ID: "w", Name: "w", Role: pki.RoleWorker}, {ID: "x", Name: "x", Role: pki.RoleWorker},
	}
	reports := []TunnelReport{
		{NodeID: "a", Name: "a", At: now, Tunnels: []apitype.Tunnel{{Name: "w", Remote: "192.0.2.3:4242"}, {Name: "x", Remote: "192.0.2.4:4242"}}},
		{NodeID: "w", Name: "w", At: now.Add(-time.Minute), Tunnels: []apitype.Tunnel{{Name: "a", Remote: "192.0.2.1:1"}}},
		{NodeID: "w", Name: "w", At: now, Tunnels: []apitype.Tunnel{{Name: "a", Remote: "192.0.2.1:4242"}}},
		{NodeID: "x", Name: "x", At: now, Tunnels: []apitype.Tunnel{{Name: "a", Remote: "192.0.2.1:4242"}}},
	}
	gossip := map[string]string{"a": "alive", "b": "alive", "w": "suspect", "x": "failed"}
	m := mergeTunnels(active, reports, map[string]string{"b": "no answer: timeout"}, gossip)
	if got, want := edgesText(m), "a-w seen from [a w] via [a→192.0.2.3:4242 w→192.0.2.1:4242]; "; got != want {
		t.Errorf("edges:\n got %s\nwant %s", got, want)
	}
	if got, want := nodesText(m), "a:reported:1 b:no answer: timeout w:reported:1 x:gossip: failed "; got != want {
		t.Errorf("nodes:\n got %s\nwant %s", got, want)
	}
}

func reportNames(r TunnelReports) []string {
	var out []string
	for _, x := range r.Reports {
		out = append(out, x.Name)
	}
	return out
}

func edgesText(m apitype.TunnelMap) string {
	s := ""
	for _, e := range m.Edges {
		var via []string
		for _, p := range e.Paths {
			r := p.Remote
			if p.Relayed {
				r = "relayed"
			}
			via = append(via, p.From+"→"+r)
		}
		s += fmt.Sprintf("%s-%s seen from %v via %v; ", e.A, e.B, e.SeenFrom, via)
	}
	return s
}

func nodesText(m apitype.TunnelMap) string {
	s := ""
	for _, n := range m.Nodes {
		if n.Reported {
			s += fmt.Sprintf("%s:reported:%d ", n.Name, n.Tunnels)
		} else {
			s += n.Name + ":" + n.Problem + " "
		}
	}
	return s
}
