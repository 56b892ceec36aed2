package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/member"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// Init creates a cluster with this node as its origin: both CAs (whose keys
// never leave this machine), the gossip key, this node's control identity,
// and raft bootstrapped with this node as the single voter. Everything is
// built in memory first; node.json, written last, commits it. The audit
// actor is the local API caller in ctx (operatorOn).
func (a *Agent) Init(ctx context.Context, req apitype.InitRequest) (*apitype.InitResponse, error) {
	done, err := a.beginOp()
	if err != nil {
		return nil, err
	}
	defer done()
	if err := a.serving(); err != nil {
		return nil, err
	}
	if err := enroll.ValidName(req.Cluster); err != nil {
		return nil, fmt.Errorf("cluster name: %w", err)
	}
	name := firstNonEmpty(req.Name, a.cfg.NodeName, defaultNodeName())
	if err := enroll.ValidName(name); err != nil {
		return nil, fmt.Errorf("node name (from --name, node_name or the hostname): %w", err)
	}
	// The pin, or the default route's interface address (mesh.ChooseUnderlay).
	chosen, err := mesh.ChooseUnderlay(a.preflight().UnderlayPin(req.AdvertiseAddr, req.AdvertiseIface), nil)
	if err != nil {
		return nil, err
	}
	underlay := chosen.Addr
	existing, err := statedir.Load(a.cfg.StateDir)
	if err != nil && !req.Force {
		return nil, err
	}
	if existing != nil && !req.Force {
		return nil, codes.Wrap(codes.AlreadyInitialised, fmt.Errorf("this node is %s", existing))
	}
	if err := statedir.RefuseCAWipe(a.cfg.StateDir, "init"); err != nil {
		return nil, err
	}

	overlay, overlay6, err := a.initOverlays(req)
	if err != nil {
		return nil, err
	}
	plan, err := a.planInit(req.Cluster, name, underlay, overlay, overlay6, operatorOn(ctx, name))
	if err != nil {
		return nil, err
	}

	// From here on the state dir changes.
	a.stopRuntime()
	a.setPhase(phaseUnjoined, nil)
	if err := statedir.Wipe(a.cfg.StateDir); err != nil {
		return nil, err
	}
	rt, err := a.commitInit(ctx, plan)
	if err != nil {
		_ = statedir.WipeFailedInit(a.cfg.StateDir)
		return nil, err
	}
	a.setPhase(phaseRunning, rt)
	statedir.SettlePending(a.cfg.StateDir) // keys of an abandoned join, if any, are moot now
	a.log.Info("cluster created", "code", codes.EventClusterCreated, "cluster", req.Cluster,
		"cluster_id", plan.facts.ClusterID, "node", name, "overlay_ip", plan.facts.Overlay.Addr())
	resp := &apitype.InitResponse{
		ClusterID: plan.facts.ClusterID, Cluster: req.Cluster, Node: name,
		CAFingerprint: plan.ca.Fingerprint().String(),
		OverlayIP:     plan.facts.Overlay.Addr().String(), Underlay: underlay.String(), UnderlayWhy: chosen.Why,
	}
	if ip6 := plan.boot.Origin.OverlayIP6; ip6.IsValid() {
		resp.OverlayIP6 = ip6.String()
	}
	return resp, nil
}

// initOverlays are the new cluster's overlays: IPv4 from --overlay-cidr
// or overlay_cidr, IPv6 from --overlay-cidr6 (state.ChooseOverlay6: a
// generated ULA /64 by default, none for an IPv4-only cluster).
func (a *Agent) initOverlays(req apitype.InitRequest) (netip.Prefix, netip.Prefix, error) {
	v4s := firstNonEmpty(req.OverlayCIDR, a.cfg.OverlayCIDR)
	v4, err := config.ParseOverlayCIDR(v4s)
	if err != nil {
		return netip.Prefix{}, netip.Prefix{}, codes.Wrap(codes.ConfigInvalid, fmt.Errorf("overlay %q (--overlay-cidr or overlay_cidr): %w", v4s, err))
	}
	v6, err := state.ChooseOverlay6(v4, req.OverlayCIDR6, req.Overlay6Global)
	if err != nil {
		return netip.Prefix{}, netip.Prefix{}, err
	}
	return v4, v6, nil
}

// initPlan is everything init will write, built before anything is written.
type initPlan struct {
	ca    *pki.CA
	id    *pki.Identity
	facts *statedir.Facts
	boot  *state.Bootstrap
}

func (a *Agent) planInit(cluster, name string, underlay netip.Addr, overlay, overlay6 netip.Prefix, actor string) (*initPlan, error) {
	now := a.d.Now()
	var ca *pki.CA
	var err error
	if overlay6.IsValid() {
		ca, err = pki.NewDualStackCA(cluster, overlay, overlay6, now)
	} else {
		ca, err = pki.NewCA(cluster, overlay, now)
	}
	if err != nil {
		return nil, fmt.Errorf("create CAs: %w", err)
	}
	nodeID, clusterID := newID(), newID()
	keys, err := pki.NewKeys(name)
	if err != nil {
		return nil, fmt.Errorf("generate keys: %w", err)
	}
	tlsPEM, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: name, NodeID: nodeID,
		Role: pki.RoleControl, IPs: []netip.Addr{underlay}, Lifetime: a.cfg.TLSLifetime}, now)
	if err != nil {
		return nil, fmt.Errorf("sign own TLS leaf: %w", err)
	}
	ip := netip.PrefixFrom(overlay.Addr().Next(), overlay.Bits())
	var ip6 netip.Prefix
	if overlay6.IsValid() {
		ip6 = netip.PrefixFrom(state.Overlay6For(overlay, overlay6, ip.Addr()), overlay6.Bits())
	}
	nebPEM, err := ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: name, IP: ip, IP6: ip6,
		Groups: []string{string(pki.RoleControl)}, Lifetime: a.cfg.NebulaCertLifetime}, now)
	if err != nil {
		return nil, fmt.Errorf("sign own Nebula cert: %w", err)
	}
	id := &pki.Identity{CACert: ca.CertPEM(), Cert: tlsPEM, Key: keys.TLSKeyPEM,
		NebulaCACert: ca.NebulaCertPEM(), NebulaCert: nebPEM, NebulaKey: keys.NebulaKeyPEM}
	leaf, err := id.Leaf()
	if err != nil {
		return nil, err
	}
	nebFP, nebExp, err := pki.NebulaCertInfo(nebPEM)
	if err != nil {
		return nil, err
	}
	tlsKey, err := pki.CSRPublicKey(keys.CSR) // the key renewals may certify
	if err != nil {
		return nil, err
	}
	gossipKey := newGossipKey()
	host := underlay.String()
	enrollAddr := net.JoinHostPort(host, strconv.Itoa(a.cfg.Ports.Control))
	facts := &statedir.Facts{
		NodeID: nodeID, Name: name, Role: pki.RoleControl, CAHolder: true,
		ClusterID: clusterID, ClusterName: cluster, Overlay: ip, Underlay: underlay,
		Seeds: []string{enrollAddr}, GossipKeys: [][]byte{gossipKey}, Joined: now, MachineID: a.machineIDToRecord(),
	}
	origin := state.Node{
		ID: nodeID, Name: name, Role: pki.RoleControl, State: state.NodeActive,
		Underlay: host, EnrollAddr: enrollAddr,
		RaftAddr:   net.JoinHostPort(host, strconv.Itoa(a.cfg.Ports.Raft)),
		SerfAddr:   net.JoinHostPort(ip.Addr().String(), strconv.Itoa(a.cfg.Ports.Gossip)), // gossip rides the overlay
		NebulaPort: a.cfg.Ports.Nebula, OverlayIP: ip.Addr(), OverlayIP6: ip6.Addr(),
		TLSFingerprint: pki.FingerprintOf(leaf).String(), TLSExpires: leaf.NotAfter,
		NebulaFingerprint: nebFP, NebulaExpires: nebExp, NebulaPublicKey: keys.NebulaPublicPEM,
		NebulaCert: nebPEM, NebulaIssued: now, TLSCert: tlsPEM, TLSPublicKey: tlsKey,
		Version: a.d.Version, Created: now, Updated: now,
	}
	boot := &state.Bootstrap{
		Cluster: state.Cluster{
			ID: clusterID, Name: cluster, Created: now, CACert: ca.CertPEM(), NebulaCACert: ca.NebulaCertPEM(),
			CAFingerprint: ca.Fingerprint().String(), Overlay: overlay, Overlay6: overlay6, GossipKeys: [][]byte{gossipKey}, CAHolder: nodeID,
		},
		Origin: origin, At: now, Actor: actor,
	}
	return &initPlan{ca: ca, id: id, facts: facts, boot: boot}, nil
}

// commitInit writes the plan: CA and identity files, raft bootstrapped and
// its first entry committed, then node.json last.
func (a *Agent) commitInit(ctx context.Context, p *initPlan) (*member.Runtime, error) {
	if err := p.ca.Save(filepath.Join(a.cfg.StateDir, statedir.CADir)); err != nil {
		return nil, statedir.WriteErr(err)
	}
	if err := p.id.Save(filepath.Join(a.cfg.StateDir, statedir.IdentityDir)); err != nil {
		return nil, statedir.WriteErr(err)
	}
	rt, err := a.startRuntime(ctx, p.facts, runtimeStart{boot: p.boot})
	if err != nil {
		return nil, err
	}
	if err := statedir.Save(a.cfg.StateDir, p.facts); err != nil {
		rt.Stop()
		return nil, err
	}
	return rt, nil
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
