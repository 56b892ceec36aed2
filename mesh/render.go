package mesh

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/slackhq/nebula/cert"
	"gopkg.in/yaml.v3"
)

// The typed shape of the Nebula v1.10.3 config meshd writes. Only the keys
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
	UnsafeRoutes []nebulaUnsafeRoute `yaml:"unsafe_routes,omitempty"`
}

// nebulaUnsafeRoute is one entry of tun.unsafe_routes, with the keys
// Nebula v1.10.3 reads (overlay/route.go parseUnsafeRoutes). install is
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

	// Routable lists the unsafe networks of the node's certificate. Nebula
	// ignores the key; it is here so that the firewall section changes
	// when they do. Nebula v1.10.3 rebuilds its firewall on reload only
	// when the firewall section changed (Interface.reloadFirewall, with a
	// TODO about certificates), but the firewall takes the addresses this
	// node may handle (routableNetworks: its overlay address and the
	// certificate's unsafe networks) and whether rules without local_cidr
	// match only the overlay address from the certificate it was built
	// with. A reload bringing a certificate that carries new routes would
	// otherwise keep dropping their traffic (ErrInvalidLocalIP) until a
	// restart, and one that dropped a route would keep letting it in.
	Routable []string `yaml:"meshd_routable,omitempty"`
}

type nebulaTimers struct {
	ConnectionAliveInterval int `yaml:"connection_alive_interval"`
	PendingDeletionInterval int `yaml:"pending_deletion_interval"`
}

type nebulaHandshakes struct {
	QueryBuffer int `yaml:"query_buffer"`
}

// QueryBuffer is handshakes.query_buffer, the queue of lighthouse queries:
// Nebula 1.12's default. Nebula 1.10.3's 64 blocks whoever queues a query
// once it is full, the overlay's send path included (a packet for a peer
// with no tunnel starts a handshake, which queries the lighthouses): in a
// 50-join burst each node starts some 50 handshakes at once, and on a
// starved box a worker's sends stalled while its peers' handshakes still
// got answers (docs/performance.md). 1.12 raised the default to 1024 and
// drops a query rather than block (nebula #1910).
const QueryBuffer = 1024

type nebulaLogging struct {
	Level            string `yaml:"level"`
	Format           string `yaml:"format"`
	DisableTimestamp bool   `yaml:"disable_timestamp"`
}

// firewall is c's firewall as Nebula reads it: the gossip port's rule
// first (Config.GossipPort), then c's rules; nil renders as an empty list
// (drop everything), never as a missing key. routable are the unsafe
// networks of c's certificate (see nebulaFirewall.Routable).
func firewall(c Config, routable []netip.Prefix) nebulaFirewall {
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
	nets := slices.Clone(routable)
	slices.SortFunc(nets, netip.Prefix.Compare)
	for _, n := range nets {
		fw.Routable = append(fw.Routable, n.String())
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
// Render reads the certificate only for what it renders from it (the
// unsafe networks, see nebulaFirewall.Routable); it does not drop the
// node's own overlay address from the host lists: Start and Reload do
// that before rendering.
func Render(c Config) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	crt, _, err := cert.UnmarshalCertificateFromPEM(c.Cert) // Validate parsed it
	if err != nil {
		return "", fmt.Errorf("render Nebula config: %w", err)
	}
	interval, timers := 10, (*nebulaTimers)(nil)
	if c.Fast {
		interval, timers = 1, &nebulaTimers{ConnectionAliveInterval: 2, PendingDeletionInterval: 2}
	}
	var tun *nebulaTun
	if !c.Userspace {
		tun = &nebulaTun{Dev: c.TunDev, MTU: c.MTU, UnsafeRoutes: unsafeRoutes(c)}
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
			SoMark: c.SoMark,
		},
		Punchy:     nebulaPunchy{Punch: true, Respond: true, Delay: PunchDelay.String()},
		Relay:      nebulaRelay{Relays: relays(c), AmRelay: c.AmRelay, UseRelays: true},
		Tun:        tun,
		Firewall:   firewall(c, crt.UnsafeNetworks()),
		Timers:     timers,
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
