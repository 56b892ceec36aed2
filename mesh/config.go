package mesh

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/slackhq/nebula/overlay"
)

// MaxMTU bounds Config.MTU: Nebula v1.12 caps tun.mtu at the largest
// datagram it reads (9001) less its largest overhead (64 bytes), with only
// a log line (overlay/tun.go getMTU), so a larger MTU would run as 8937
// while meshd believed otherwise; v1.11 took up to 9001.
const MaxMTU = overlay.MaxMTU

// MaxRoutines bounds Config.Routines: more reader/writer pairs than this
// would only contend for the same cores.
const MaxRoutines = 64

// Defaults used by DefaultConfig.
const (
	DefaultListenHost   = "0.0.0.0"
	DefaultListenPort   = 4242
	DefaultTunDev       = "meshd0"
	DefaultMTU          = 1300
	DefaultRoutines     = 1
	DefaultSocketBuffer = 8 << 20 // 8 MiB: no UDP receive drops under load (research §5)
)

// Lighthouse is a control node as Nebula sees it: its overlay address and
// the underlay addresses it listens on.
type Lighthouse struct {
	OverlayIP netip.Addr
	Underlay  []netip.AddrPort
}

// UnsafeRoute sends the traffic for a prefix outside the overlay to the
// node that carries it (one entry of tun.unsafe_routes): a LAN behind that
// node, or 0.0.0.0/0 through an exit node. The carrier's certificate must
// hold Route as an unsafe network (pki.NebulaRequest.Routes), or Nebula on
// this node drops what comes back from it, and the carrier's firewall lets
// in only what a rule with local_cidr allows (FirewallRule.LocalCIDR).
type UnsafeRoute struct {
	// Route is a masked IPv4 prefix outside the overlay network; only
	// 0.0.0.0/0 (pki.ExitRoute) may contain it (pki.CheckRoute).
	Route netip.Prefix
	// Via is the overlay address of the node that carries Route now.
	Via netip.Addr
	// Install adds a kernel route for Route on the TUN device (kernel
	// mode). Without it Nebula still sends to Via what the kernel hands
	// the TUN device for Route, but adds no route: meshd routes an exit
	// node's 0.0.0.0/0 into the device by other means.
	Install bool
}

// Config is everything meshd decides about its Nebula instance. It is plain
// data: copy it, compare it with reflect.DeepEqual, and render it with
// Render. It carries no yaml tags; Render maps it onto Nebula's keys.
//
// The node's own overlay address is the first network of Cert. An entry
// for it in Lighthouses or StaticHosts (a control node's list of control
// nodes includes itself) is dropped by Start, Reload and Verify.
type Config struct {
	// CACert, Cert and Key are PEM: the Nebula CA bundle, this node's host
	// certificate (exactly one) and its private key. They are inlined in
	// the rendered YAML and never logged.
	CACert, Cert, Key []byte

	// ListenHost and ListenPort are the UDP underlay listener: an IP
	// literal and a port. Port 0 picks a free port and is allowed only
	// for a node that is not a lighthouse.
	ListenHost string
	ListenPort int

	// AmLighthouse makes this node a lighthouse (a control node).
	AmLighthouse bool

	// AmRelay lets other nodes relay their tunnels through this one
	// (relay.am_relay) when they cannot reach each other directly
	// (symmetric NAT on both ends, UDP between them blocked). Nebula never
	// lets a relay use relays itself. A change needs a restart.
	AmRelay bool

	// Relays are the overlay addresses of the relays other nodes may use
	// to reach this one (relay.relays): Nebula tells the lighthouses, and a
	// peer that cannot reach this node directly asks one of them to carry
	// the tunnel. Each must run with AmRelay. Ignored (rendered empty) on
	// a relay; the node's own address is dropped. Reload applies a change
	// live.
	Relays []netip.Addr

	// Lighthouses are the control nodes. Their overlay addresses become
	// lighthouse.hosts (empty on a lighthouse itself) and their underlay
	// addresses enter static_host_map.
	Lighthouses []Lighthouse

	// StaticHosts are the other known nodes (cluster state and gossip),
	// merged into static_host_map.
	StaticHosts map[netip.Addr][]netip.AddrPort

	// Roaming are the overlay addresses of peers that have no static host
	// map entry (a stock Nebula member, issue 35: a device the lighthouses
	// find wherever it is). Nothing renders them; they are tracked like
	// the static hosts, so that their tunnels are listed (Tunnels) and
	// closed when their certificate is blocked.
	Roaming []netip.Addr

	// Blocklist holds Nebula certificate fingerprints (hex SHA-256) that
	// this instance refuses (pki.blocklist).
	Blocklist []string

	// TunDev and MTU describe the kernel TUN device. TunDev is unused in
	// userspace mode.
	TunDev string
	MTU    int

	// Userspace runs the overlay on a gvisor network stack inside the
	// process instead of a kernel TUN device: no root needed, and the
	// overlay is reached only through DialContext and Listen.
	Userspace bool

	// SocketBuffer sets listen.read_buffer and listen.write_buffer in
	// bytes (0 leaves the kernel default). Setting it needs CAP_NET_ADMIN;
	// without it Nebula logs a warning and carries on.
	SocketBuffer int

	// LocalAllowList restricts the local addresses this node advertises
	// to lighthouses to those inside these prefixes; everything else is
	// denied, IPv4 and IPv6 alike. Empty keeps Nebula's default (advertise
	// every non-loopback address). Production passes the underlay /32; a
	// test on loopback passes 127.0.0.1/32, which advertises nothing at
	// all (Nebula never advertises loopback addresses), so the lighthouse
	// uses the address it observes.
	LocalAllowList []netip.Prefix

	// Routines is Nebula's routines: how many reader/writer pairs serve
	// the TUN device and the UDP socket (Nebula uses multi-queue TUN and
	// SO_REUSEPORT for more than 1 on Linux). 1 to MaxRoutines; a change
	// needs a restart.
	Routines int

	// Offloads asks Nebula for its Linux offloads (offload.go): TUN TSO
	// and USO (kernel mode) and UDP GRO and GSO. One the kernel refuses
	// is left out with a warning, never a failed start. A change needs a
	// restart. DefaultConfig sets it.
	Offloads bool

	// SoMark sets SO_MARK on Nebula's UDP socket (listen.so_mark), so
	// that policy routing can keep the underlay packets out of a route
	// into the overlay (an exit node's 0.0.0.0/0). 0 leaves the socket
	// unmarked; at most 2^31-1. Setting it needs CAP_NET_ADMIN: without it
	// Nebula logs an error and carries on. Reload applies a change live.
	SoMark int

	// UnsafeRoutes send the traffic for prefixes other nodes carry to
	// them (tun.unsafe_routes, rendered sorted by Route). No two entries
	// have the same Route; Via lies in this node's overlay network and is
	// not its own address; Route is none of the prefixes this node's own
	// certificate holds. They take effect on a kernel TUN device only:
	// Nebula's userspace device sends every packet to its destination
	// address, so in userspace mode they are rendered but route nothing.
	// Reload applies a change live (Nebula replaces its routes and the
	// kernel routes of entries with Install).
	UnsafeRoutes []UnsafeRoute

	// Inbound and Outbound are the overlay firewall (firewall.inbound,
	// firewall.outbound): Nebula drops what no rule allows. DefaultConfig
	// sets AnyAny for both; an empty list drops everything. Reload
	// applies a change live.
	Inbound, Outbound []FirewallRule

	// GossipPort, when not 0, is the port meshd's gossip binds on the
	// overlay address (udp and tcp): Render opens it in both directions
	// to every holder of a cluster certificate, ahead of Inbound and
	// Outbound, so no firewall an operator writes cuts the cluster's own
	// membership. Nebula authenticates every packet to it.
	GossipPort int

	// Fast shortens Nebula's timers for tests: connection_alive_interval
	// and pending_deletion_interval 2 s, lighthouse.interval 1 s.
	Fast bool

	// IdleTimeout, when not 0, closes a tunnel that carried no packet
	// either way for that long (tunnels.drop_inactive and
	// inactivity_timeout; Nebula looks every connection_alive_interval,
	// so it closes up to that much later). A tunnel to a lighthouse or to
	// one of Relays is kept however idle (Nebula patch 10). The next
	// packet to the peer opens a new one (idle.go). 0 keeps every tunnel
	// up, as Nebula does by default. Reload applies a change live.
	IdleTimeout time.Duration
}

// DefaultConfig returns the production defaults: listen on 0.0.0.0:4242,
// TUN device meshd0 with MTU 1300, 1 routine, 8 MiB socket buffers. The caller adds
// the certificates and the peers.
func DefaultConfig() Config {
	return Config{
		ListenHost:   DefaultListenHost,
		ListenPort:   DefaultListenPort,
		TunDev:       DefaultTunDev,
		MTU:          DefaultMTU,
		Routines:     DefaultRoutines,
		Offloads:     true,
		SocketBuffer: DefaultSocketBuffer,
		Inbound:      AnyAny(),
		Outbound:     AnyAny(),
	}
}

// ConfigError names the field of a Config that is wrong. Value is never a
// PEM block or key.
type ConfigError struct {
	Field string
	Value string
	Err   error
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("mesh config %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("mesh config %s %q: %v", e.Field, e.Value, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// restartFields lists the fields whose change Nebula (v1.10.3; v1.12.0 too) cannot apply
// live (research §1): the listener, the TUN device, the lighthouse role,
// the device kind, the timers and the routines (read once by nebula.Main). The own overlay address is checked from
// the certificates by Reload.
func restartFields(old, new Config) []string {
	var out []string
	if addrOf(old.ListenHost) != addrOf(new.ListenHost) {
		out = append(out, "ListenHost")
	}
	if old.ListenPort != new.ListenPort {
		out = append(out, "ListenPort")
	}
	if !new.Userspace && old.TunDev != new.TunDev {
		out = append(out, "TunDev")
	}
	if old.AmLighthouse != new.AmLighthouse {
		out = append(out, "AmLighthouse")
	}
	if old.AmRelay != new.AmRelay { // nebula.Main reads use_relays once, from am_relay
		out = append(out, "AmRelay")
	}
	if old.Userspace != new.Userspace {
		out = append(out, "Userspace")
	}
	if old.Fast != new.Fast {
		out = append(out, "Fast")
	}
	if old.Routines != new.Routines {
		out = append(out, "Routines")
	}
	if old.Offloads != new.Offloads {
		out = append(out, "Offloads")
	}
	return out
}

func addrOf(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a.Unmap()
}

// withoutSelf returns c without entries for the node's own overlay
// address. Maps and slices are copied; c is not modified.
func (c Config) withoutSelf(self netip.Addr) Config {
	out := c
	out.Lighthouses = make([]Lighthouse, 0, len(c.Lighthouses))
	for _, lh := range c.Lighthouses {
		if lh.OverlayIP != self {
			out.Lighthouses = append(out.Lighthouses, lh)
		}
	}
	out.StaticHosts = make(map[netip.Addr][]netip.AddrPort, len(c.StaticHosts))
	for ip, u := range c.StaticHosts {
		if ip != self {
			out.StaticHosts[ip] = u
		}
	}
	out.Relays = slices.DeleteFunc(slices.Clone(c.Relays), func(r netip.Addr) bool { return r == self })
	return out
}
