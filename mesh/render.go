package mesh

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// The typed shape of the Nebula config meshd writes (written for v1.10.3;
// v1.11.0 and v1.12.0 read the same keys). Only the keys
// meshd sets are here; Nebula's defaults cover the rest. Field order is the
// order in the YAML, and yaml.v3 sorts map keys, so Render is
// deterministic.
type nebulaConfig struct {
	PKI           nebulaPKI           `yaml:"pki"`
	StaticHostMap map[string][]string `yaml:"static_host_map"`
	Lighthouse    nebulaLighthouse    `yaml:"lighthouse"`
	Listen        nebulaListen        `yaml:"listen"`
	Punchy        nebulaPunchy        `yaml:"punchy"`
	Relay         nebulaRelay         `yaml:"relay"`
	Tun           *nebulaTun          `yaml:"tun,omitempty"` // userspace mode: nil, or the unsafe routes only
	Firewall      nebulaFirewall      `yaml:"firewall"`
	Timers        *nebulaTimers       `yaml:"timers,omitempty"`
	Tunnels       *nebulaTunnels      `yaml:"tunnels,omitempty"` // Config.IdleTimeout
	Handshakes    nebulaHandshakes    `yaml:"handshakes"`
	Routines      int                 `yaml:"routines"`
	Cipher        string              `yaml:"cipher"` // one value per process: Nebula keeps it in a global (research §1)
	Logging       nebulaLogging       `yaml:"logging"`
}

type nebulaPKI struct {
	CA                string   `yaml:"ca"`
	Cert              string   `yaml:"cert"`
	Key               string   `yaml:"key"`
	Blocklist         []string `yaml:"blocklist"`
	DisconnectInvalid bool     `yaml:"disconnect_invalid"`
}

type nebulaLighthouse struct {
	AmLighthouse   bool            `yaml:"am_lighthouse"`
	Interval       int             `yaml:"interval"`
	Hosts          []string        `yaml:"hosts"`
	LocalAllowList map[string]bool `yaml:"local_allow_list,omitempty"`
}

type nebulaListen struct {
	Host        string `yaml:"host"`
	Port        int    `yaml:"port"`
	ReadBuffer  int    `yaml:"read_buffer,omitempty"`
	WriteBuffer int    `yaml:"write_buffer,omitempty"`
	SoMark      int    `yaml:"so_mark,omitempty"`
	UDPOffloads bool   `yaml:"udp_offloads,omitempty"` // GRO and GSO (offload.go)
}

type nebulaPunchy struct {
	Punch   bool   `yaml:"punch"`
	Respond bool   `yaml:"respond"`
	Delay   string `yaml:"delay"`
}

// PunchDelay is punchy.delay: how long a node told by a lighthouse that a
// peer is looking for it waits before punching towards the peer. Nebula's
// default, 1 s, is meant for NATs that misbehave when a punch crosses the
// peer's handshake; with it, a tunnel agent/pathup moves off its relay went
// direct 1.92-1.99 s after the first packet with lan timers, against issue
// 29's 2 s (BenchmarkNATDirectPath, 2026-12-02).
const PunchDelay = 100 * time.Millisecond

type nebulaRelay struct {
	Relays    []string `yaml:"relays"`
	AmRelay   bool     `yaml:"am_relay"`
	UseRelays bool     `yaml:"use_relays"`
}

// nebulaTun is the TUN device (kernel mode) and the unsafe routes (both
// modes; see Config.UnsafeRoutes).
type nebulaTun struct {
	Dev          string              `yaml:"dev,omitempty"`
	MTU          int                 `yaml:"mtu,omitempty"`
	UseOffloads  bool                `yaml:"use_offloads,omitempty"` // TSO/USO with virtio headers (offload.go)
	UnsafeRoutes []nebulaUnsafeRoute `yaml:"unsafe_routes,omitempty"`
}

// nebulaUnsafeRoute is one entry of tun.unsafe_routes, with the keys
// Nebula reads (overlay/route.go parseUnsafeRoutes, v1.10.3 to v1.12.0). install is
// always written: Nebula's default is true.
type nebulaUnsafeRoute struct {
	Route   string `yaml:"route"`
	Via     string `yaml:"via"`
	Install bool   `yaml:"install"`
	Metric  int    `yaml:"metric,omitempty"`
}

// nebulaFirewall is the overlay firewall (Config.Inbound, Config.Outbound).
// Nebula drops anything no rule allows.
type nebulaFirewall struct {
	Outbound []FirewallRule `yaml:"outbound"`
	Inbound  []FirewallRule `yaml:"inbound"`
}

type nebulaTimers struct {
	ConnectionAliveInterval int `yaml:"connection_alive_interval"`
	PendingDeletionInterval int `yaml:"pending_deletion_interval"`
}

// nebulaTunnels is Nebula's tunnel manager: close idle tunnels.
type nebulaTunnels struct {
	DropInactive      bool   `yaml:"drop_inactive"`
	InactivityTimeout string `yaml:"inactivity_timeout"`
}

type nebulaHandshakes struct {
	QueryBuffer int `yaml:"query_buffer"`
}

// QueryBuffer is handshakes.query_buffer, the queue of lighthouse queries:
// Nebula 1.12's default, written all the same. The default of 1.10.3 and
// 1.11.0, 64, blocked whoever queued a query once it was full (v1.11.0
// lighthouse.go:111, 512), the overlay's send path included (a packet for
// a peer with no tunnel starts a handshake, which queries the
// lighthouses): in a 50-join burst each node starts some 50 handshakes at
// once, and on a starved box a worker's sends stalled while its peers'
// handshakes still got answers (docs/performance.md). 1.12 raised the
// default to 1024 and drops a query rather than block, counting it in
// lighthouse.query.dropped (nebula #1910).
const QueryBuffer = 1024

type nebulaLogging struct {
	Level            string `yaml:"level"`
	Format           string `yaml:"format"`
	DisableTimestamp bool   `yaml:"disable_timestamp"`
}

// firewall is c's firewall as Nebula reads it: the gossip port's rule
// first (Config.GossipPort), then c's rules; nil renders as an empty list
// (drop everything), never as a missing key. Nebula takes the addresses
// this node may handle (its overlay address and its certificate's unsafe
// networks) from the certificate, and since v1.11 rebuilds the firewall
// when a reload brings a certificate with others (Interface.reloadFirewall,
// v1.12.0 interface.go:553-555); v1.10.3 did so only when this section
// changed, so meshd wrote the unsafe networks into it
// (firewall.meshd_routable) until the move to v1.11.0.
func firewall(c Config) nebulaFirewall {
	var own []FirewallRule
	if c.GossipPort > 0 {
		own = []FirewallRule{{Port: strconv.Itoa(c.GossipPort), Proto: "any", Host: "any"}}
	}
	fw := nebulaFirewall{Outbound: slices.Concat(own, c.Outbound), Inbound: slices.Concat(own, c.Inbound)}
	if fw.Outbound == nil {
		fw.Outbound = []FirewallRule{}
	}
	if fw.Inbound == nil {
		fw.Inbound = []FirewallRule{}
	}
	return fw
}

// UnsafeRouteMetric is the metric of the kernel route Nebula installs for
// an unsafe route. Nebula installs it with RouteReplace and removes it
// with RouteDel, both keyed by prefix, table and metric: at metric 0 the
// route replaced a route of the host's own to the same prefix (the
// connected route of a LAN the host sits on: a standby router's own LAN,
// seen in e2e.TestRoutes), and its removal then deleted it. At this
// metric it is a route of its own beside the host's, which win for a
// network the host reaches directly (connected routes have metric 0, or
// 100 to 600 under NetworkManager).
const UnsafeRouteMetric = 4242

// unsafeRoutes is tun.unsafe_routes: c.UnsafeRoutes sorted by Route.
func unsafeRoutes(c Config) []nebulaUnsafeRoute {
	rs := slices.Clone(c.UnsafeRoutes)
	slices.SortFunc(rs, func(a, b UnsafeRoute) int { return a.Route.Compare(b.Route) })
	var out []nebulaUnsafeRoute
	for _, r := range rs {
		u := nebulaUnsafeRoute{Route: r.Route.String(), Via: r.Via.String(), Install: r.Install}
		if r.Install {
			u.Metric = UnsafeRouteMetric
		}
		out = append(out, u)
	}
	return out
}

// Render returns the Nebula YAML for c, after Validate. The same Config
// always renders to the same text. The text holds the private key: hand
// it to Nebula, never to a log.
//
// Render does not drop the node's own overlay address from the host
// lists: Start and Reload do that before rendering.
func Render(c Config) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	interval, timers := int(LighthouseInterval(c)/time.Second), (*nebulaTimers)(nil)
	if c.Fast {
		timers = &nebulaTimers{ConnectionAliveInterval: 2, PendingDeletionInterval: 2}
	}
	var tun *nebulaTun
	if !c.Userspace {
		tun = &nebulaTun{Dev: c.TunDev, MTU: c.MTU, UseOffloads: c.Offloads, UnsafeRoutes: unsafeRoutes(c)}
	} else if len(c.UnsafeRoutes) > 0 {
		tun = &nebulaTun{UnsafeRoutes: unsafeRoutes(c)} // Nebula's user device reads none of it
	}
	static := map[string][]string{}
	for ip, addrs := range staticHostMap(c) {
		for _, a := range addrs {
			static[ip.String()] = append(static[ip.String()], a.String())
		}
	}
	hosts := []string{}
	if !c.AmLighthouse { // a lighthouse lists no lighthouses
		for _, ip := range lighthouseIPs(c) {
			hosts = append(hosts, ip.String())
		}
	}
	blocklist := slices.Clone(c.Blocklist)
	slices.Sort(blocklist)
	blocklist = slices.Compact(blocklist)
	if blocklist == nil {
		blocklist = []string{}
	}
	nc := nebulaConfig{
		PKI: nebulaPKI{
			CA: string(c.CACert), Cert: string(c.Cert), Key: string(c.Key),
			Blocklist: blocklist, DisconnectInvalid: true,
		},
		StaticHostMap: static,
		Lighthouse: nebulaLighthouse{
			AmLighthouse:   c.AmLighthouse,
			Interval:       interval,
			Hosts:          hosts,
			LocalAllowList: localAllowList(c.LocalAllowList),
		},
		Listen: nebulaListen{
			Host: addrOf(c.ListenHost).String(), Port: c.ListenPort,
			ReadBuffer: c.SocketBuffer, WriteBuffer: c.SocketBuffer,
			SoMark: c.SoMark, UDPOffloads: c.Offloads,
		},
		Punchy:     nebulaPunchy{Punch: true, Respond: true, Delay: PunchDelay.String()},
		Relay:      nebulaRelay{Relays: relays(c), AmRelay: c.AmRelay, UseRelays: true},
		Tun:        tun,
		Firewall:   firewall(c),
		Timers:     timers,
		Tunnels:    idleTunnels(c.IdleAfter()),
		Handshakes: nebulaHandshakes{QueryBuffer: QueryBuffer},
		Routines:   c.Routines,
		Cipher:     "aes",
		// info reaches the log bridge, which shows it only at slog debug.
		Logging: nebulaLogging{Level: "info", Format: "text", DisableTimestamp: true},
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(nc); err != nil {
		return "", fmt.Errorf("render Nebula config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("render Nebula config: %w", err)
	}
	return buf.String(), nil
}

// staticHostMap merges the lighthouses and the static hosts into Nebula's
// static_host_map: overlay address to sorted, de-duplicated underlay
// addresses. Verify reads the same map back.
func staticHostMap(c Config) map[netip.Addr][]netip.AddrPort {
	out := map[netip.Addr][]netip.AddrPort{}
	add := func(ip netip.Addr, addrs []netip.AddrPort) {
		for _, a := range addrs {
			out[ip] = append(out[ip], netip.AddrPortFrom(a.Addr().Unmap(), a.Port()))
		}
	}
	for _, lh := range c.Lighthouses {
		add(lh.OverlayIP, lh.Underlay)
	}
	for ip, addrs := range c.StaticHosts {
		add(ip, addrs)
	}
	for ip, addrs := range out {
		slices.SortFunc(addrs, netip.AddrPort.Compare)
		out[ip] = slices.Compact(addrs)
	}
	return out
}

// relays is relay.relays: c.Relays sorted and de-duplicated, none on a
// relay (Nebula ignores them there, and says so in its log).
func relays(c Config) []string {
	out := []string{}
	if c.AmRelay {
		return out
	}
	rs := slices.Clone(c.Relays)
	slices.SortFunc(rs, netip.Addr.Compare)
	for _, r := range slices.Compact(rs) {
		out = append(out, r.String())
	}
	return out
}

// lighthouseIPs returns the lighthouses' overlay addresses, sorted.
func lighthouseIPs(c Config) []netip.Addr {
	out := make([]netip.Addr, 0, len(c.Lighthouses))
	for _, lh := range c.Lighthouses {
		out = append(out, lh.OverlayIP)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// localAllowList turns allow prefixes into Nebula's lighthouse.local_allow_list:
// each prefix allowed, and everything else denied for both address
// families (Nebula would otherwise allow every IPv6 address when only IPv4
// prefixes are listed). An allowed /0 replaces the deny for its family.
// Empty stays empty: Nebula's default.
func localAllowList(allow []netip.Prefix) map[string]bool {
	if len(allow) == 0 {
		return nil
	}
	out := map[string]bool{"0.0.0.0/0": false, "::/0": false}
	for _, p := range allow {
		out[p.Masked().String()] = true
	}
	return out
}
