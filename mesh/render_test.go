package mesh

import (
	"bytes"
	"crypto/ed25519"
	"flag"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slackhq/nebula"
	"github.com/slackhq/nebula/cert"
	"github.com/slackhq/nebula/config"
	"gopkg.in/yaml.v3"

	"github.com/meshd/meshd/codes"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yaml from Render")

// Fixed fake PEM blocks: structurally valid (Validate accepts them as CA
// and key, which it does not parse), so the golden files never change.
// fakeCert does not parse as a certificate: Validate refuses it as Cert.
const (
	fakeCA   = "-----BEGIN NEBULA CERTIFICATE-----\nbWVzaGQgZ29sZGVuLWZpbGUgZmFrZSBOZWJ1bGEgQ0E=\n-----END NEBULA CERTIFICATE-----\n"
	fakeCert = "-----BEGIN NEBULA CERTIFICATE-----\nbWVzaGQgZ29sZGVuLWZpbGUgZmFrZSBOZWJ1bGEgaG9zdCBjZXJ0aWZpY2F0ZQ==\n-----END NEBULA CERTIFICATE-----\n"
	fakeKey  = "-----BEGIN NEBULA X25519 PRIVATE KEY-----\nbWVzaGQgZ29sZGVuLWZpbGUgZmFrZSBOZWJ1bGEgcHJpdmF0ZSBrZXk=\n-----END NEBULA X25519 PRIVATE KEY-----\n"
)

// goldenCert is a real Nebula host certificate for 10.42.0.5/16 that
// carries routes as unsafe networks (Validate and Render parse the
// certificate). Fixed keys and times, and Ed25519 signing, make it the
// same text on every run, so the golden files never change. It is signed
// by a CA other than fakeCA, which Render never checks.
func goldenCert(t testing.TB, routes ...netip.Prefix) []byte {
	t.Helper()
	caKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{'m'}, ed25519.SeedSize))
	nb, na := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := (&cert.TBSCertificate{
		Version: cert.Version1, Name: "golden-ca", Networks: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16")}, IsCA: true,
		NotBefore: nb, NotAfter: na, PublicKey: caKey.Public().(ed25519.PublicKey), Curve: cert.Curve_CURVE25519,
	}).Sign(nil, cert.Curve_CURVE25519, caKey)
	if err != nil {
		t.Fatal(err)
	}
	host, err := (&cert.TBSCertificate{
		Version: cert.Version1, Name: "golden", Networks: []netip.Prefix{netip.MustParsePrefix("10.42.0.5/16")},
		UnsafeNetworks: routes, Groups: []string{"worker"}, NotBefore: nb, NotAfter: na,
		PublicKey: bytes.Repeat([]byte{'k'}, 32), Curve: cert.Curve_CURVE25519,
	}).Sign(ca, cert.Curve_CURVE25519, caKey)
	if err != nil {
		t.Fatal(err)
	}
	out, err := host.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	fpA = "aa" + strings.Repeat("0", 62)
	fpB = "bb" + strings.Repeat("1", 62)
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
func ip(s string) netip.Addr     { return netip.MustParseAddr(s) }

// goldenWorker is a production worker, 10.42.0.5: two lighthouses, three
// other nodes (one also reachable at a lighthouse's address, to show the
// merge).
func goldenWorker(t testing.TB) Config {
	c := DefaultConfig()
	c.CACert, c.Cert, c.Key = []byte(fakeCA), goldenCert(t), []byte(fakeKey)
	c.Lighthouses = []Lighthouse{
		{OverlayIP: ip("10.42.0.2"), Underlay: []netip.AddrPort{ap("192.0.2.2:4242")}},
		{OverlayIP: ip("10.42.0.1"), Underlay: []netip.AddrPort{ap("192.0.2.1:4242"), ap("198.51.100.1:4242")}},
	}
	c.StaticHosts = map[netip.Addr][]netip.AddrPort{
		ip("10.42.0.10"): {ap("192.0.2.10:4242")},
		ip("10.42.0.9"):  {ap("192.0.2.9:4242"), ap("192.0.2.9:4242")},
		ip("10.42.0.1"):  {ap("203.0.113.1:4242")},
	}
	c.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("192.0.2.20/32")}
	c.Relays = []netip.Addr{ip("10.42.0.2"), ip("10.42.0.1"), ip("10.42.0.2")}
	return c
}

func goldenCases(t testing.TB) map[string]Config {
	lighthouse := goldenWorker(t)
	lighthouse.AmLighthouse, lighthouse.AmRelay = true, true

	blocklist := goldenWorker(t)
	blocklist.Blocklist = []string{fpB, fpA, fpB}

	userspace := DefaultConfig()
	userspace.CACert, userspace.Cert, userspace.Key = []byte(fakeCA), goldenCert(t), []byte(fakeKey)
	userspace.ListenHost, userspace.ListenPort = "127.0.0.1", 0
	userspace.Userspace, userspace.Fast, userspace.SocketBuffer = true, true, 0
	userspace.TunDev = ""
	userspace.Lighthouses = []Lighthouse{{OverlayIP: ip("10.42.0.1"), Underlay: []netip.AddrPort{ap("127.0.0.1:42000")}}}
	userspace.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

	return map[string]Config{
		"worker":     goldenWorker(t),
		"lighthouse": lighthouse,
		"blocklist":  blocklist,
		"userspace":  userspace,
		"firewall":   goldenFirewall(t),
		"routes":     goldenRoutes(t),
		"ipv6":       goldenIPv6(t),
	}
}

// goldenIPv6 is a worker on an IPv6-only underlay (issue 34): Nebula
// listens on "::", its lighthouses and static hosts are "[addr]:port",
// and it advertises its one IPv6 underlay address.
func goldenIPv6(t testing.TB) Config {
	c := DefaultConfig()
	c.CACert, c.Cert, c.Key = []byte(fakeCA), goldenCert(t), []byte(fakeKey)
	c.ListenHost = "::"
	c.Lighthouses = []Lighthouse{
		{OverlayIP: ip("10.42.0.1"), Underlay: []netip.AddrPort{ap("[fd99::1]:4242")}},
		{OverlayIP: ip("10.42.0.2"), Underlay: []netip.AddrPort{ap("[2001:db8::2]:4242"), ap("[fd99::2]:4242")}},
	}
	c.StaticHosts = map[netip.Addr][]netip.AddrPort{ip("10.42.0.9"): {ap("[fd99::9]:4242")}}
	c.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("fd99::5/128")}
	c.Relays = []netip.Addr{ip("10.42.0.1")}
	return c
}

// TestRenderIPv6Underlay: Nebula reads an IPv6 underlay back as meant:
// listen.host "::", static_host_map entries "[addr]:port" (the form
// Nebula's own parser, net.SplitHostPort, takes), the local allow list
// allowing the node's IPv6 address and nothing else.
func TestRenderIPv6Underlay(t *testing.T) {
	nc := readByNebula(t, goldenCases(t)["ipv6"])
	if got := nc.GetString("listen.host", ""); got != "::" {
		t.Errorf("listen.host = %q, want ::", got)
	}
	shm := nc.GetMap("static_host_map", nil)
	for key, want := range map[string][]any{
		"10.42.0.1": {"[fd99::1]:4242"},
		"10.42.0.2": {"[2001:db8::2]:4242", "[fd99::2]:4242"},
		"10.42.0.9": {"[fd99::9]:4242"},
	} {
		got, _ := shm[key].([]any)
		if !slices.Equal(got, want) {
			t.Errorf("static_host_map[%s] = %v, want %v", key, shm[key], want)
		}
		for _, e := range got {
			if _, err := netip.ParseAddrPort(e.(string)); err != nil {
				t.Errorf("static_host_map[%s] entry %v: %v", key, e, err)
			}
		}
	}
	lal, err := nebula.NewLocalAllowListFromConfig(nc, "lighthouse.local_allow_list")
	if err != nil {
		t.Fatalf("Nebula rejects the local allow list: %v", err)
	}
	for addr, want := range map[string]bool{"fd99::5": true, "fd99::6": false, "192.0.2.20": false} {
		if got := lal.Allow(ip(addr)); got != want {
			t.Errorf("local_allow_list allows %s = %t, want %t", addr, got, want)
		}
	}
}

// goldenRoutes is a worker that carries a LAN itself (its certificate
// holds 192.168.50.0/24, which one inbound rule opens), reaches two
// prefixes and an exit node through other nodes, and marks its underlay
// packets.
func goldenRoutes(t testing.TB) Config {
	c := goldenWorker(t)
	c.Cert = goldenCert(t, netip.MustParsePrefix("192.168.50.0/24"))
	c.SoMark = 0x6d65
	c.UnsafeRoutes = []UnsafeRoute{
		{Route: netip.MustParsePrefix("192.168.60.0/24"), Via: ip("10.42.0.9"), Install: true},
		{Route: netip.MustParsePrefix("0.0.0.0/0"), Via: ip("10.42.0.10")},
		{Route: netip.MustParsePrefix("172.16.0.0/12"), Via: ip("10.42.0.9"), Install: true},
	}
	c.Inbound = []FirewallRule{
		{Port: "any", Proto: "any", Host: "any"},
		{Port: "443", Proto: "tcp", Group: "worker", LocalCIDR: "192.168.50.0/24"},
	}
	return c
}

func TestRenderGolden(t *testing.T) {
	for name, c := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			got, err := Render(c)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 { // map iteration order must not leak into the text
				again, err := Render(c)
				if err != nil || again != got {
					t.Fatalf("Render is not deterministic (err %v)", err)
				}
			}
			path := filepath.Join("testdata", name+".yaml")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./mesh -run TestRenderGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("Render differs from %s (rerun with -update if intended):\n%s", path, got)
			}
		})
	}
}

// readByNebula renders c and loads the text into Nebula's own config
// type, as Nebula would read it.
func readByNebula(t *testing.T, c Config) *config.C {
	t.Helper()
	text, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	nc := config.NewC(slog.New(slog.DiscardHandler))
	if err := nc.LoadString(text); err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestRenderReadByNebula loads rendered YAML into Nebula's own config
// type and reads the keys back the way Nebula does.
func TestRenderReadByNebula(t *testing.T) {
	nc := readByNebula(t, goldenCases(t)["blocklist"])
	if got, want := nc.GetStringSlice("lighthouse.hosts", nil), []string{"10.42.0.1", "10.42.0.2"}; !slices.Equal(got, want) {
		t.Errorf("lighthouse.hosts = %v, want %v", got, want)
	}
	if got, want := nc.GetStringSlice("pki.blocklist", nil), []string{fpA, fpB}; !slices.Equal(got, want) {
		t.Errorf("pki.blocklist = %v, want %v", got, want)
	}
	if got, want := nc.GetStringSlice("relay.relays", nil), []string{"10.42.0.1", "10.42.0.2"}; !slices.Equal(got, want) {
		t.Errorf("relay.relays = %v, want %v", got, want)
	}
	if nc.GetBool("relay.am_relay", true) || !nc.GetBool("relay.use_relays", false) {
		t.Errorf("a worker renders am_relay %t, use_relays %t; want false, true",
			nc.GetBool("relay.am_relay", true), nc.GetBool("relay.use_relays", false))
	}
	if got := nc.GetString("pki.key", ""); got != fakeKey {
		t.Errorf("pki.key does not round-trip: %q", got)
	}
	shm := nc.GetMap("static_host_map", nil)
	if len(shm) != 4 {
		t.Errorf("static_host_map has %d entries, want 4: %v", len(shm), shm)
	}
	for key, want := range map[string][]any{
		"10.42.0.1": {"192.0.2.1:4242", "198.51.100.1:4242", "203.0.113.1:4242"}, // lighthouse and static entry merged
		"10.42.0.9": {"192.0.2.9:4242"},                                          // duplicate dropped
	} {
		if got, _ := shm[key].([]any); !slices.Equal(got, want) {
			t.Errorf("static_host_map[%s] = %v, want %v", key, shm[key], want)
		}
	}
	if nc.GetInt("listen.port", 0) != DefaultListenPort || nc.GetString("tun.dev", "") != DefaultTunDev {
		t.Errorf("listen.port/tun.dev not rendered: %d %q", nc.GetInt("listen.port", 0), nc.GetString("tun.dev", ""))
	}

	lal, err := nebula.NewLocalAllowListFromConfig(nc, "lighthouse.local_allow_list")
	if err != nil {
		t.Fatalf("Nebula rejects the local allow list: %v", err)
	}
	for addr, want := range map[string]bool{"192.0.2.20": true, "192.0.2.21": false, "10.0.0.1": false, "2001:db8::1": false} {
		if got := lal.Allow(ip(addr)); got != want {
			t.Errorf("local_allow_list allows %s = %t, want %t", addr, got, want)
		}
	}
}

// TestRenderRelayListsNoRelays: a relay (a control node) renders
// am_relay and no relays of its own (Nebula lets no relay use relays).
func TestRenderRelayListsNoRelays(t *testing.T) {
	nc := readByNebula(t, goldenCases(t)["lighthouse"])
	if !nc.GetBool("relay.am_relay", false) || len(nc.GetStringSlice("relay.relays", nil)) != 0 {
		t.Errorf("a relay renders am_relay %t, relays %v; want true, none",
			nc.GetBool("relay.am_relay", false), nc.GetStringSlice("relay.relays", nil))
	}
}

// TestRenderQueryBuffer: every config sets handshakes.query_buffer to
// QueryBuffer (Nebula 1.10.3 reads 64 otherwise, and a full queue blocks
// the overlay's send path).
func TestRenderQueryBuffer(t *testing.T) {
	for name, c := range goldenCases(t) {
		if got := readByNebula(t, c).GetInt("handshakes.query_buffer", 64); got != QueryBuffer {
			t.Errorf("%s: handshakes.query_buffer %d, want %d", name, got, QueryBuffer)
		}
	}
}

// TestRenderRoutinesAndMTU: the configured routines and MTU reach the keys
// Nebula reads (routines, tun.mtu); the golden files show the defaults.
func TestRenderRoutinesAndMTU(t *testing.T) {
	c := goldenWorker(t)
	c.Routines, c.MTU = 2, 1420
	nc := readByNebula(t, c)
	if got := nc.GetInt("routines", 0); got != 2 {
		t.Errorf("routines = %d, want 2", got)
	}
	if got := nc.GetInt("tun.mtu", 0); got != 1420 {
		t.Errorf("tun.mtu = %d, want 1420", got)
	}
}

// TestRenderOpensGossipPort: with GossipPort set, the gossip port is open
// in both directions ahead of the operator's rules, even when those drop
// everything; without it only the operator's rules are rendered.
func TestRenderOpensGossipPort(t *testing.T) {
	c := goldenWorker(t)
	c.Inbound, c.Outbound = nil, []FirewallRule{{Port: "443", Proto: "tcp", Host: "any"}}
	c.GossipPort = 7946
	text, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Firewall nebulaFirewall `yaml:"firewall"`
	}
	if err := yaml.Unmarshal([]byte(text), &got); err != nil {
		t.Fatal(err)
	}
	gossipRule := FirewallRule{Port: "7946", Proto: "any", Host: "any"}
	if want := []FirewallRule{gossipRule}; !slices.EqualFunc(got.Firewall.Inbound, want, ruleEqual) {
		t.Errorf("inbound %+v, want %+v", got.Firewall.Inbound, want)
	}
	if want := []FirewallRule{gossipRule, c.Outbound[0]}; !slices.EqualFunc(got.Firewall.Outbound, want, ruleEqual) {
		t.Errorf("outbound %+v, want %+v", got.Firewall.Outbound, want)
	}
	c.GossipPort = 0
	if text, err = Render(c); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "7946") {
		t.Errorf("GossipPort 0 rendered a gossip rule:\n%s", text)
	}
	c.GossipPort = 70000
	if _, err := Render(c); codes.Of(err) != codes.ConfigInvalid {
		t.Errorf("GossipPort 70000: %v, want %s", err, codes.ConfigInvalid)
	}
}

func ruleEqual(a, b FirewallRule) bool {
	return a.Port == b.Port && a.Proto == b.Proto && a.Host == b.Host && a.Group == b.Group &&
		slices.Equal(a.Groups, b.Groups) && a.CIDR == b.CIDR
}

func TestRenderLighthouseListsNoHosts(t *testing.T) {
	nc := readByNebula(t, goldenCases(t)["lighthouse"])
	if hosts := nc.GetStringSlice("lighthouse.hosts", nil); len(hosts) != 0 {
		t.Errorf("a lighthouse lists lighthouse.hosts %v", hosts)
	}
	if !nc.GetBool("lighthouse.am_lighthouse", false) {
		t.Error("am_lighthouse not set")
	}
	if len(nc.GetMap("static_host_map", nil)) != 4 {
		t.Error("a lighthouse still needs the other lighthouses in static_host_map")
	}
}

func TestRenderUserspaceHasNoTun(t *testing.T) {
	text, err := Render(goldenCases(t)["userspace"])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "\ntun:") {
		t.Errorf("userspace config renders a tun section:\n%s", text)
	}
	if !strings.Contains(text, "connection_alive_interval: 2") || !strings.Contains(text, "interval: 1\n") {
		t.Errorf("Fast timers missing:\n%s", text)
	}
}

func TestLocalAllowListRender(t *testing.T) {
	if got := localAllowList(nil); got != nil {
		t.Errorf("empty list renders %v, want Nebula's default", got)
	}
	got := localAllowList([]netip.Prefix{netip.MustParsePrefix("::/0"), netip.MustParsePrefix("192.0.2.7/24")})
	want := map[string]bool{"0.0.0.0/0": false, "::/0": true, "192.0.2.0/24": true}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %t, want %t", k, got[k], v)
		}
	}
}
