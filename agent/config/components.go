package config

import (
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// The one place meshd.yaml (File) and a node's facts become the
// configs of the parts: Nebula, raft, the enroll server and the control
// plane (serf's, which carries the agent's gossip tags, is the agent's
// gossipConfig). components_test.go keeps the mapping in a golden file.

// MeshBase is this node's Nebula config without its identity and peers
// (meshConfig adds those on every reconcile).
func (c File) MeshBase(role pki.Role, underlay netip.Addr) mesh.Config {
	m := mesh.DefaultConfig()
	m.ListenHost, m.ListenPort = NebulaListenHost(c.BindAddr, underlay), c.Ports.Nebula
	m.AmLighthouse = role == pki.RoleControl
	m.AmRelay = role == pki.RoleControl || c.Relay // every control node relays for nodes that cannot meet directly; a volunteer too
	m.TunDev, m.Userspace, m.Fast = c.TunDevice, c.OverlayMode == OverlayUserspace, c.Timers == TimersFast
	m.Routines, m.Offloads = c.OverlayRoutines, c.OverlayOffloads
	m.GossipPort = c.Ports.Gossip // gossip rides the overlay: its port stays open whatever the firewall says
	if !m.AmRelay {
		// A worker closes idle tunnels (issue 54 item 3): it holds its
		// lighthouses, its relays and the peers it talks to, not every
		// peer it ever reached. Control nodes and relays keep theirs:
		// every worker's host updates, the tunnels they carry.
		m.IdleTimeout = mesh.IdleTimeout // IdleTimeoutFast under timers: fast (mesh.Config.IdleAfter)
	}
	c.Policy().Apply(&m) // firewall and MTU; a reload replaces them (firewall.go)
	// Advertise only the underlay address to lighthouses. Nebula never
	// advertises loopback addresses, so on loopback it advertises nothing
	// and lighthouses use the address they observe.
	if u := underlay; u.IsLoopback() {
		m.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	} else {
		m.LocalAllowList = []netip.Prefix{netip.PrefixFrom(u, u.BitLen())}
	}
	return m
}

// NebulaListenHost is the address Nebula's UDP socket binds: bind_addr,
// except that an unspecified bind_addr (0.0.0.0 or ::, "all addresses")
// on a node whose underlay is IPv6 is "::". Nebula, unlike Go's
// listeners, opens an IPv4-only socket for 0.0.0.0; "::" is an IPv6
// socket that takes IPv4 too (dual-stack) unless net.ipv6.bindv6only is
// set. A node with an IPv4 underlay keeps 0.0.0.0, so a host with IPv6
// switched off still starts. (raft, port 7300 and STUN bind with Go,
// whose listener on an unspecified address takes both families.)
func NebulaListenHost(bind string, underlay netip.Addr) string {
	if b, err := netip.ParseAddr(bind); err == nil && b.IsUnspecified() && underlay.IsValid() && !underlay.Unmap().Is4() {
		return netip.IPv6Unspecified().String()
	}
	return bind
}

// RaftNodeTiming is raft's timers.
func (c File) RaftNodeTiming() raftnode.Timing {
	return raftnode.Timing{HeartbeatTimeout: c.Raft.HeartbeatTimeout, ElectionTimeout: c.Raft.ElectionTimeout,
		LeaderLease: c.Raft.LeaderLease}
}

// ControlConfig is the control plane's config for the node nodeID named
// name, whose CA keys (on the CA holder) live in caDir.
func (c File) ControlConfig(nodeID, name, caDir string) control.Config {
	return control.Config{NodeID: nodeID, Name: name, PromoteTimeout: c.Raft.PromoteTimeout,
		NebulaLifetime: c.NebulaCertLifetime, TokenRetention: c.TokenRetention, TLSLifetime: c.TLSLifetime,
		RevocationAckTimeout: c.RevocationAckTimeout, JoinBound: c.JoinBound(), EphemeralAfter: c.EphemeralAfter, CADir: caDir}
}

// EnrollConfig is the enroll server's config: the clock-skew bound a
// joiner's claimed time is judged by (the joiner's own bound is the same
// key, see enrollDeps); the STUN port it tells joiners it serves (every
// control node runs the responder on ports.stun); the throttle at its
// defaults.
func (c File) EnrollConfig() enroll.ServerConfig {
	e := enroll.DefaultServerConfig()
	e.MaxSkew = c.MaxClockSkew
	e.STUNPort = c.Ports.STUN
	return e
}

// FitnessEvery is how often a node checks that its state dir takes a
// write and, on a control node, compares its clock with the other control
// nodes' (agent/fitness): 5 s, 500 ms with fast timers.
func (c File) FitnessEvery() time.Duration {
	if c.Timers == TimersFast {
		return 500 * time.Millisecond
	}
	return 5 * time.Second
}

// PortLimits are port 7300's limits: the defaults, with room to answer a
// control node's raft join, which waits up to raft.promote_timeout for
// its promotion (plus the margin the plane gives it).
func (c File) PortLimits() control.Limits {
	l := control.DefaultLimits()
	l.Answer = max(l.Answer, c.Raft.PromoteTimeout+20*time.Second)
	return l
}

// joinBoundFast is how long a node may stay joining under `timers: fast`
// (tests) before the leader records its join failed. The default,
// control.DefaultJoinBound, is twice joinConfirmTimeout; a test of a join
// that never confirms should not wait a minute for it.
const joinBoundFast = 20 * time.Second

// joinBound is the control plane's JoinBound for this config.
func (c File) JoinBound() time.Duration {
	if c.Timers == TimersFast {
		return joinBoundFast
	}
	return control.DefaultJoinBound
}
