package member

import (
	"context"
	"fmt"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// gossipView is this node's gossip view (desired.View): the members that count,
// with those raft records as gone (left, removed, failed) shown left at
// once, and gossip's word that a member is down shown only once this
// node's own direct probe of it failed (evidence.go). `meshctl status`
// counts it, `meshctl nodes` and the metrics show it, and the control
// plane decides on it (control.Hooks.Gossip).
func (ms *membership) gossipView() map[string]gossip.Status {
	in := ms.overlayInputs()
	if src := ms.peers(); src != nil { // liveness.go
		in.Probes = ms.evidence.judge(desired.Doubted(in), src.LastSeen)
	}
	return desired.View(in)
}

// gossipMembers is the gossip view as text, by node name.
func (ms *membership) gossipMembers() map[string]string {
	out := map[string]string{}
	for name, st := range ms.gossipView() {
		out[name] = string(st)
	}
	return out
}

// gossipVersions is the version each gossip member that counts
// advertises, by name.
func (ms *membership) gossipVersions() map[string]string {
	out := map[string]string{}
	for _, m := range ms.counted() {
		out[m.Name] = m.Tags[tagVersion]
	}
	return out
}

func (ov *overlay) overlayStatus() *apitype.Overlay {
	if ov.mesh == nil {
		return nil
	}
	applied := ov.applied()
	o := &apitype.Overlay{Mode: string(config.OverlayKernel), Device: applied.TunDev, Lighthouse: applied.AmLighthouse,
		Lighthouses: []string{}, StaticHosts: ov.staticPeerCount(), Blocklist: len(applied.Blocklist),
		Tunnels: []apitype.Tunnel{}}
	if applied.Userspace {
		o.Mode, o.Device = string(config.OverlayUserspace), ""
	}
	if fp, exp, err := pki.NebulaCertInfo(applied.Cert); err == nil {
		o.CertFingerprint, o.CertExpires = fp, exp
	}
	for _, l := range applied.Lighthouses {
		o.Lighthouses = append(o.Lighthouses, l.OverlayIP.String())
	}
	o.AmRelay = applied.AmRelay
	if !applied.AmRelay { // Nebula ignores relays on a relay (mesh.Render renders none)
		for _, r := range applied.Relays {
			o.Relays = append(o.Relays, r.String())
		}
	}
	o.Tunnels = append(o.Tunnels, ov.tunnels()...) // tunnels.go
	off := ov.mesh.Offloads()
	o.Offloads, o.OffloadsRefused = append([]string{}, off.InUse()...), off.Refused(applied.Userspace)
	if b, ok := ov.overlayErr.Load().(errBox); ok && b.err != nil {
		o.Error = apitype.NewError(codes.OrInternal(b.err), b.err)
	}
	return o
}

func (ms *membership) gossipStatus() *apitype.Gossip {
	if ms.gossip == nil {
		return nil
	}
	g := &apitype.Gossip{KeyErrors: ms.gossip.KeyErrors()}
	g.Keys, g.PrimaryKey, g.KeysRotated = ms.keys.keyStatus()
	for _, st := range ms.gossipView() {
		g.Members++
		if st == gossip.StatusAlive {
			g.Alive++
		}
	}
	return g
}

// Status fills in s what this member knows of itself: identity,
// addresses, overlay, gossip, certificate expiry, and on a control node
// raft, the CA holder, waiting approvals and quorum health, with their
// warnings.
func (rt *Runtime) Status(ctx context.Context, s *apitype.Status) {
	f := rt.facts
	s.Cluster, s.ClusterID, s.Node, s.NodeID = f.ClusterName, f.ClusterID, f.Name, f.NodeID
	s.Role = string(f.Role)
	s.OverlayIP, s.Underlay = f.Overlay.Addr().String(), f.Underlay.String()
	if ip6 := rt.ov.overlay6(); ip6.IsValid() {
		s.OverlayIP6 = ip6.Addr().String()
	}
	s.Overlay, s.Gossip = rt.ov.overlayStatus(), rt.members.gossipStatus()
	s.OutOfPool = !inPool(rt.cfg.GossipPool, f.Role) // outofpool.go
	s.TLSCertExpires = rt.live.Leaf().NotAfter
	s.CertExpires, s.CertExpiresOf = s.TLSCertExpires, "tls"
	if o := s.Overlay; o != nil && !o.CertExpires.IsZero() && o.CertExpires.Before(s.CertExpires) {
		s.CertExpires, s.CertExpiresOf = o.CertExpires, "nebula"
	}
	rt.pairs.fillStatus(s)    // pairhealth.go
	rt.fillSilence(s.Overlay) // silence.go
	var dnsWarns []apitype.Warning
	s.DNS, dnsWarns = rt.dns.status() // names.go
	s.Warnings = append(s.Warnings, dnsWarns...)
	if s.Gossip != nil && s.Gossip.KeyErrors > 0 {
		s.Warnings = append(s.Warnings, apitype.Warning{Code: codes.GossipKey,
			Detail: fmt.Sprintf("%d gossip messages could not be decrypted with this node's keys", s.Gossip.KeyErrors)})
	}
	s.Warnings = append(s.Warnings, rt.fitnessWarnings()...)
	s.Raft = string(raftnode.None)
	if rt.copies != nil {
		w := rt.copies.Stats()
		s.Watch = &apitype.WatchStatus{From: w.From, Index: w.Index, Streams: w.Streams, Full: w.Full, Deltas: w.Deltas, Strict: w.Strict}
	}
	if rt.ctl != nil {
		r := rt.ctl.Raft()
		s.Raft, s.RaftTerm, s.RaftApplied = string(r.RoleOf(f.NodeID)), r.Term(), r.FSM().Index()
		s.Approvals = rt.ctl.WaitingApprovals()
		if c, ok := r.FSM().Cluster(); ok {
			s.CAHolder = c.CAHolder == f.NodeID
			if n, ok := r.FSM().Node(c.CAHolder); ok {
				s.CAHolderNode = n.Name
			}
			s.CABackedUp = c.CABackedUp
		}
		if id := r.LeaderID(); id != "" {
			if n, ok := r.FSM().Node(id); ok {
				s.Leader = n.Name
			} else {
				s.Leader = id
			}
		}
		if r.IsVoter(f.NodeID) { // quorum health: what a voter's loss would cost
			q := rt.ctl.QuorumHealth(ctx)
			s.Quorum = &q
			s.Warnings = append(s.Warnings, control.QuorumWarnings(q)...)
		}
	}
	rt.removedStatus(s) // standing.go
}

// staticPeerCount is how many peers the applied static host map holds:
// its IPv4 keys. A dual-stack peer is in it by its IPv6 address too, and
// a lighthouse by its IPv6 address alone (its IPv4 one is in the
// lighthouse list), so the map's length counts neither peers nor anything
// an operator reads. Read under appliedMu: the overlay loop changes the
// map in place (overlaydelta.go).
func (ov *overlay) staticPeerCount() int {
	ov.appliedMu.Lock()
	defer ov.appliedMu.Unlock()
	n := 0
	for ip := range ov.meshApplied.StaticHosts {
		if ip.Is4() {
			n++
		}
	}
	return n
}
