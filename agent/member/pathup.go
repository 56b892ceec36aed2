package member

import (
	"context"
	"net/netip"

	"github.com/meshd/meshd/agent/pathup"
	"github.com/meshd/meshd/mesh"
)

// meshPaths is the running overlay as agent/pathup sees it, with what
// gossip tells of the NATs at both ends (natpath.go).
type meshPaths struct {
	m        *mesh.Mesh
	noDirect func(netip.Addr) (string, bool)
	wake     *bell // rung when the tunnels, a member or this node's NAT changed (pathwake.go)
}

func (p meshPaths) Relayed() []netip.Addr                     { return p.m.RelayedPeers() }
func (p meshPaths) Candidates(ip netip.Addr) []netip.AddrPort { return p.m.DirectCandidates(ip) }
func (p meshPaths) UseDirect(ip netip.Addr, a netip.AddrPort) bool {
	return p.m.UseDirect(ip, a)
}
func (p meshPaths) Rebuild(ip netip.Addr)                 { p.m.RebuildTunnel(ip) }
func (p meshPaths) NoDirect(ip netip.Addr) (string, bool) { return p.noDirect(ip) }
func (p meshPaths) Changes() <-chan struct{}              { return p.wake.wait() }

// newPathUp is the loop that moves this node's relayed tunnels onto a
// direct path where the NATs allow one (agent/pathup; a pair the NATs
// reported in gossip rule out is left relayed: natpath.go), probing a peer as
// pair health does: a TCP connection to its gossip port through the
// tunnel (a reset counts as an answer).
func (rt *Runtime) newPathUp() *pathup.Upgrader {
	probe := func(ctx context.Context, ip netip.Addr) error {
		return rt.reachAddr(ctx, netip.AddrPortFrom(ip, uint16(rt.ports.Gossip)))
	}
	return pathup.New(pathup.DefaultConfig(), rt.mesh.OverlayIP(), meshPaths{m: rt.mesh, noDirect: rt.noDirectTo, wake: &rt.pathWake}, probe, rt.log, rt.now)
}
