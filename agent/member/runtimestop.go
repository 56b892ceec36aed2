package member

import (
	"context"
	"net/netip"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/pki"
)

// stop stops the components in reverse order of start.
func (rt *Runtime) Stop() {
	if rt.loops != nil {
		rt.loops()
	}
	if rt.ctl != nil {
		// Raft leadership first, then the watch streams, then port
		// 7300 (control/stop.go).
		rt.ctl.StopServing(rt.control)
	}
	rt.wg.Wait()
	rt.dns.stop()
	if rt.client != nil {
		rt.client.CloseIdle()
	}
	if rt.ctl != nil {
		if err := rt.ctl.Close(); err != nil {
			rt.log.Warn("raft shutdown", "err", err)
		}
	}
	rt.members.evidence.close() // its probes ride the overlay: before gossip and Nebula stop
	if rt.gossip != nil {
		if err := rt.gossip.Shutdown(); err != nil {
			rt.log.Warn("gossip shutdown", "err", err)
		}
	}
	if rt.subnets != nil {
		rt.subnets.stop()
	}
	if rt.mesh != nil && rt.ov.parked != nil {
		rt.ov.parked.park(rt.mesh, rt.ov.applied(), rt.log)
	} else if rt.mesh != nil {
		rt.mesh.Stop()
	}
}

// identity is this node's current identity.
func (nd *node) identity() *pki.Identity { return nd.live.Identity() }

// overlayAddr is this node's overlay address without the prefix length.
func (nd *node) overlayAddr() netip.Addr { return nd.facts.Overlay.Addr() }

// Facts is this node's node.json as the runtime runs it.
func (rt *Runtime) Facts() *statedir.Facts { return rt.facts }

// Plane is a control node's control plane; nil on a worker. The role is
// decided once, in Start.
func (rt *Runtime) Plane() *control.Plane { return rt.ctl }

// NodeRows are `meshctl nodes`' rows (clusterFacts.NodeRows), each with
// this node's Nebula tunnel to that node when it has one (direct, or
// relayed via whom: pathOf).
func (rt *Runtime) NodeRows(ctx context.Context) ([]apitype.Node, error) {
	rows, err := rt.cluster.NodeRows(ctx)
	if rt.mesh == nil || len(rows) == 0 {
		return rows, err
	}
	list, _ := rt.cluster.Records()
	byIP := map[string]*apitype.PingPath{}
	for _, tn := range rt.mesh.Tunnels() {
		byIP[tn.OverlayIP.String()] = pathOf(tn, list)
	}
	for i := range rows {
		if rows[i].ID != rt.facts.NodeID && rows[i].State == "active" && rows[i].OverlayIP != "" { // a former node's address may be another's now
			rows[i].Tunnel = byIP[rows[i].OverlayIP]
		}
		if rows[i].State == "active" {
			rows[i].DNSName = rt.dns.fqdn(rows[i].Name)
		}
	}
	return rows, err
}

// AskNodes asks the control nodes for their node list over the internal
// API, as a member (codes.NotMember when the cluster no longer counts this
// node one).
func (rt *Runtime) AskNodes(ctx context.Context) ([]apitype.Node, error) {
	var rows []apitype.Node
	err := rt.client.AskSeeds(ctx, rt.seeds(), control.PathNodes, &rows)
	return rows, err
}
