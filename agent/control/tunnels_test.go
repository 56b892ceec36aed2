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

	ip := func(name string) string { // a report names each peer at its record's overlay IP
		n, _ := c2.p.Raft().FSM().NodeByName(name)
		return n.OverlayIP.String()
	}
	report := TunnelsRequest{Tunnels: []apitype.Tunnel{
		{Name: "origin", OverlayIP: ip("origin"), Remote: "192.0.2.1:4242"},
		{Name: "w2", OverlayIP: ip("w2"), Relayed: true},
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

// TestForgedTunnelReports is issue 27's tenth attack: a worker's report
// added edges to a node that does not exist, with free text as the
// remote. A remote that is no address and port refuses the report; a
// tunnel to a name that is no active node at its record's overlay IP is
// dropped; and the merged view draws edges to active nodes only.
func TestForgedTunnelReports(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	_, w1 := c.worker(t, origin, "w1")
	ctx := within(t, 20*time.Second)
	waitState(t, c2, "id-w1", state.NodeActive)
	originIP := func() string {
		n, _ := c2.p.Raft().FSM().NodeByName("origin")
		return n.OverlayIP.String()
	}()

	junk := TunnelsRequest{Tunnels: []apitype.Tunnel{{Name: "origin", OverlayIP: originIP, Remote: "<script>evil</script>"}}}
	if err := w1.Call(ctx, c2.addr, PathSelfTunnels, false, junk, nil); codes.Of(err) != codes.BadRequest {
		t.Fatalf("a report with free text as the remote: %v, want %s", err, codes.BadRequest)
	}
	forged := TunnelsRequest{Tunnels: []apitype.Tunnel{
		{Name: "origin", OverlayIP: originIP, Remote: "192.0.2.1:4242"},
		{Name: "ghost", OverlayIP: "10.42.9.9", Remote: "192.0.2.9:4242"},   // no such node
		{Name: "origin", OverlayIP: "10.42.9.8", Remote: "192.0.2.8:4242"},  // a real name at another IP
		{Name: "c2", OverlayIP: "10.42.9.7", Relayed: true, Remote: "junk"}, // relayed: no remote of its own
	}}
	if err := w1.Call(ctx, c2.addr, PathSelfTunnels, false, forged, nil); err != nil {
		t.Fatalf("w1 reports: %v", err)
	}
	var held TunnelReports
	if err := origin.p.client.Call(ctx, c2.addr, PathTunnels, false, nil, &held); err != nil {
		t.Fatal(err)
	}
	for _, r := range held.Reports {
		if r.Name != "w1" {
			continue
		}
		if len(r.Tunnels) != 1 || r.Tunnels[0].Name != "origin" || r.Tunnels[0].Remote != "192.0.2.1:4242" {
			t.Errorf("w1's report as held: %+v, want only its tunnel to origin", r.Tunnels)
		}
	}

	// The merge, given a report from elsewhere (another control node's
	// store), draws no edge to a name that is no active node.
	now := time.Now()
	active := []state.Node{{ID: "a", Name: "a", Role: pki.RoleControl}, {ID: "w", Name: "w", Role: pki.RoleWorker}}
	m := mergeTunnels(active, []TunnelReport{{NodeID: "w", Name: "w", At: now, Tunnels: []apitype.Tunnel{
		{Name: "a", Remote: "192.0.2.1:4242"}, {Name: "ghost", Remote: "192.0.2.9:4242"}}}}, nil, nil)
	if got, want := edgesText(m), "a-w seen from [w] via [w→192.0.2.1:4242]; "; got != want {
		t.Errorf("edges:\n got %s\nwant %s", got, want)
	}
}
