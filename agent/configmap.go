package agent

import (
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// The one place meshd.yaml (FileConfig) and a node's facts become the
// configs of the parts: Nebula, serf, raft and the control plane.
// configmap_test.go keeps the mapping in a golden file.

// meshBase is this node's Nebula config without its identity and peers
// (meshConfig adds those on every reconcile).
func (c FileConfig) meshBase(f *nodeFacts) mesh.Config {
	m := mesh.DefaultConfig()
	m.ListenHost, m.ListenPort = c.BindAddr, c.Ports.Nebula
	m.AmLighthouse = f.Role == pki.RoleControl
	m.TunDev, m.Userspace, m.Fast = c.TunDevice, c.OverlayMode == OverlayUserspace, c.Timers == TimersFast
	m.Routines = c.OverlayRoutines
	c.overlayPolicy().apply(&m) // firewall and MTU; a reload replaces them (firewall.go)
	// Advertise only the underlay address to lighthouses. Nebula never
	// advertises loopback addresses, so on loopback it advertises nothing
	// and lighthouses use the address they observe.
	if u := f.Underlay; u.IsLoopback() {
		m.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	} else {
		m.LocalAllowList = []netip.Prefix{netip.PrefixFrom(u, u.BitLen())}
	}
	return m
}

// gossipConfig is serf's config: the cluster key, this node's tags, its
// snapshot under the state dir. The logger is added by the caller.
func (c FileConfig) gossipConfig(f *nodeFacts, version string) gossip.Config {
	g := gossip.DefaultConfig()
	g.Name = f.Name
	g.BindAddr, g.BindPort = c.BindAddr, c.Ports.Gossip
	g.AdvertiseAddr, g.AdvertisePort = f.Underlay.String(), c.Ports.Gossip
	g.Keys = f.GossipKeys
	g.Tags = map[string]string{
		tagRole: string(f.Role), tagID: f.NodeID, tagOverlay: f.Overlay.Addr().String(),
		tagNebulaPort: strconv.Itoa(c.Ports.Nebula), tagVersion: version, tagKeyring: state.KeyringID(f.GossipKeys),
	}
	g.SnapshotPath = filepath.Join(c.StateDir, serfDir, "snapshot")
	g.Fast = c.Timers == TimersFast
	return g
}

// raftTiming is raft's timers.
func (c FileConfig) raftTiming() raftnode.Timing {
	return raftnode.Timing{HeartbeatTimeout: c.Raft.HeartbeatTimeout, ElectionTimeout: c.Raft.ElectionTimeout,
		LeaderLease: c.Raft.LeaderLease}
}

// controlConfig is the control plane's config.
func (c FileConfig) controlConfig(f *nodeFacts) control.Config {
	return control.Config{NodeID: f.NodeID, Name: f.Name, PromoteTimeout: c.Raft.PromoteTimeout,
		NebulaLifetime: c.NebulaCertLifetime, TokenRetention: c.TokenRetention, TLSLifetime: c.TLSLifetime,
		RevocationAckTimeout: c.RevocationAckTimeout, JoinBound: c.joinBound(), CADir: filepath.Join(c.StateDir, caDir)}
}

// enrollConfig is the enroll server's config: the clock-skew bound a
// joiner's claimed time is judged by (the joiner's own bound is the same
// key, see enrollDeps); the throttle at its defaults.
func (c FileConfig) enrollConfig() enroll.ServerConfig {
	e := enroll.DefaultServerConfig()
	e.MaxSkew = c.MaxClockSkew
	return e
}

// portLimits are port 7300's limits: the defaults, with room to answer a
// control node's raft join, which waits up to raft.promote_timeout for
// its promotion (plus the margin the plane gives it).
func (c FileConfig) portLimits() control.Limits {
	l := control.DefaultLimits()
	l.Answer = max(l.Answer, c.Raft.PromoteTimeout+20*time.Second)
	return l
}
