package nebulabundle

import (
	"encoding/pem"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/mesh"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yml from ConfigYAML")

// fakePEM is a PEM block of the given type that Validate accepts; the
// golden configs name files and never hold PEM.
func fakePEM(typ string) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: []byte("x")}) }

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
func ip(s string) netip.Addr     { return netip.MustParseAddr(s) }

// goldenBundles are the golden cases: an IPv4-only (v1) member with
// defaults, and a dual-stack (v2) one with everything set.
func goldenBundles() map[string]Bundle {
	ca := fakePEM("NEBULA CERTIFICATE")
	return map[string]Bundle{
		"v1-minimal": {
			CACerts: ca, Cert: fakePEM("NEBULA CERTIFICATE"), Key: fakePEM("NEBULA X25519 PRIVATE KEY"),
			Lighthouses: []Host{{Overlay: ip("10.42.0.1"), Underlay: []netip.AddrPort{ap("192.0.2.1:4242")}}},
		},
		"dualstack-full": {
			CACerts: append(fakePEM("NEBULA CERTIFICATE V2"), fakePEM("NEBULA CERTIFICATE")...), // mid-rotation: two CAs
			Cert:    fakePEM("NEBULA CERTIFICATE V2"),
			PKIDir:  "/etc/nebula",
			Lighthouses: []Host{
				{Overlay: ip("10.42.0.2"), Overlay6: ip("fd00:42::2"), Underlay: []netip.AddrPort{ap("[2001:db8::2]:4242"), ap("198.51.100.2:4242")}},
				{Overlay: ip("10.42.0.1"), Overlay6: ip("fd00:42::1"), Underlay: []netip.AddrPort{ap("[::ffff:192.0.2.1]:4242"), ap("192.0.2.1:4242")}},
			},
			StaticHosts: map[netip.Addr][]netip.AddrPort{
				ip("10.42.0.7"):  {ap("203.0.113.7:4242")},
				ip("fd00:42::7"): {ap("203.0.113.7:4242")},
			},
			Relays:     []netip.Addr{ip("10.42.0.2"), ip("10.42.0.1"), ip("10.42.0.2")},
			Inbound:    []Rule{{Port: "any", Proto: "icmp", Host: "any"}, {Port: "443", Proto: "tcp", Groups: []string{"laptop", "home"}}, {Port: "8000-8100", Proto: "udp", Group: "control", LocalCIDR: "any"}},
			Outbound:   []Rule{{Port: "any", Proto: "any", CIDR: "10.42.0.0/16"}},
			ListenPort: 4242,
			MTU:        1280,
		},
	}
}

// TestConfigGolden: ConfigYAML of each case is testdata/NAME.yml byte for
// byte, and the same bundle with its lists and maps in another order
// renders the same text.
func TestConfigGolden(t *testing.T) {
	for name, b := range goldenBundles() {
		t.Run(name, func(t *testing.T) {
			got, err := b.ConfigYAML()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".yml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./nebulabundle -run TestConfigGolden -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("ConfigYAML differs from %s (rerun with -update if intended):\n%s", path, got)
			}
			r := b
			r.Lighthouses = slices.Clone(b.Lighthouses)
			slices.Reverse(r.Lighthouses)
			r.Relays = slices.Clone(b.Relays)
			slices.Reverse(r.Relays)
			again, err := r.ConfigYAML()
			if err != nil {
				t.Fatal(err)
			}
			if string(again) != string(got) {
				t.Errorf("the same bundle in another order renders differently:\n%s", again)
			}
		})
	}
}

// TestConfigHoldsNoPEM: the config names the pki files and never carries
// their content, whatever the bundle holds.
func TestConfigHoldsNoPEM(t *testing.T) {
	b := goldenBundles()["v1-minimal"]
	got, err := b.ConfigYAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got), "BEGIN") {
		t.Fatalf("config.yml holds PEM:\n%s", got)
	}
}

func TestValidate(t *testing.T) {
	good := goldenBundles()["dualstack-full"]
	cases := []struct {
		name  string
		edit  func(b *Bundle)
		field string
	}{
		{"ok", func(b *Bundle) {}, ""},
		{"ok/no-key", func(b *Bundle) { b.Key = nil }, ""},
		{"fail/no-ca", func(b *Bundle) { b.CACerts = nil }, "ca_certs"},
		{"fail/ca-not-pem", func(b *Bundle) { b.CACerts = []byte("not pem") }, "ca_certs"},
		{"fail/ca-trailing-text", func(b *Bundle) { b.CACerts = append(slices.Clone(b.CACerts), "junk"...) }, "ca_certs"},
		{"fail/cert-is-a-key", func(b *Bundle) { b.Cert = fakePEM("NEBULA X25519 PRIVATE KEY") }, "cert"},
		{"fail/two-certs", func(b *Bundle) { b.Cert = append(fakePEM("NEBULA CERTIFICATE"), fakePEM("NEBULA CERTIFICATE")...) }, "cert"},
		{"fail/key-is-public", func(b *Bundle) { b.Key = fakePEM("NEBULA X25519 PUBLIC KEY") }, "key"},
		{"fail/relative-pki-dir", func(b *Bundle) { b.PKIDir = "etc/nebula" }, "pki_dir"},
		{"fail/no-lighthouse", func(b *Bundle) { b.Lighthouses = nil }, "lighthouses"},
		{"fail/lighthouse-ipv6-overlay", func(b *Bundle) {
			b.Lighthouses = []Host{{Overlay: ip("fd00:42::1"), Underlay: []netip.AddrPort{ap("192.0.2.1:4242")}}}
		}, "lighthouses[0].overlay"},
		{"fail/lighthouse-twice", func(b *Bundle) { b.Lighthouses = append(slices.Clone(b.Lighthouses), b.Lighthouses[0]) }, "lighthouses[2].overlay"},
		{"fail/lighthouse-overlay6-is-ipv4", func(b *Bundle) {
			b.Lighthouses = []Host{{Overlay: ip("10.42.0.1"), Overlay6: ip("10.42.0.1"), Underlay: []netip.AddrPort{ap("192.0.2.1:4242")}}}
		}, "lighthouses[0].overlay6"},
		{"fail/lighthouse-no-underlay", func(b *Bundle) { b.Lighthouses = []Host{{Overlay: ip("10.42.0.1")}} }, "lighthouses[0].underlay"},
		{"fail/lighthouse-port-0", func(b *Bundle) {
			b.Lighthouses = []Host{{Overlay: ip("10.42.0.1"), Underlay: []netip.AddrPort{ap("192.0.2.1:0")}}}
		}, "lighthouses[0].underlay[0]"},
		{"fail/static-unspecified", func(b *Bundle) {
			b.StaticHosts = map[netip.Addr][]netip.AddrPort{ip("10.42.0.7"): {ap("0.0.0.0:4242")}}
		}, "static_hosts[10.42.0.7][0]"},
		{"fail/relay-zero", func(b *Bundle) { b.Relays = []netip.Addr{{}} }, "relays[0]"},
		{"fail/rule-proto", func(b *Bundle) { b.Inbound = []Rule{{Port: "any", Proto: "sctp", Host: "any"}} }, "firewall.inbound[0].proto"},
		{"fail/rule-port", func(b *Bundle) { b.Outbound = []Rule{{Port: "9-1", Proto: "tcp", Host: "any"}} }, "firewall.outbound[0].port"},
		{"fail/rule-no-selector", func(b *Bundle) { b.Inbound = []Rule{{Port: "any", Proto: "any"}} }, "firewall.inbound[0].host"},
		{"fail/rule-group-and-groups", func(b *Bundle) { b.Inbound = []Rule{{Port: "any", Proto: "any", Group: "a", Groups: []string{"b"}}} }, "firewall.inbound[0].group"},
		{"fail/rule-cidr", func(b *Bundle) { b.Inbound = []Rule{{Port: "any", Proto: "any", CIDR: "10.42.0.0"}} }, "firewall.inbound[0].cidr"},
		{"fail/listen-port", func(b *Bundle) { b.ListenPort = 70000 }, "listen_port"},
		{"fail/mtu", func(b *Bundle) { b.MTU = 100 }, "mtu"},
		{"fail/mtu-past-nebulas-cap", func(b *Bundle) { b.MTU = MaxMTU + 1 }, "mtu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := good
			c.edit(&b)
			err := b.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError for %s", err, c.field)
			}
			if fe.Field != c.field {
				t.Fatalf("Validate named %s (%v), want %s", fe.Field, err, c.field)
			}
			if _, err := b.ConfigYAML(); err == nil {
				t.Fatal("ConfigYAML rendered a bundle Validate refuses")
			}
		})
	}
}

// TestErrorsHoldNoSecrets: a key with something wrong with it is refused
// without its text in the error.
func TestErrorsHoldNoSecrets(t *testing.T) {
	_, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Split(string(priv), "\n")[1] // the base64 line
	b := goldenBundles()["v1-minimal"]
	for name, key := range map[string][]byte{
		"trailing": append(slices.Clone(priv), "tail"...),
		"twice":    append(slices.Clone(priv), priv...),
	} {
		b.Key = key
		err := b.Validate()
		if err == nil {
			t.Fatalf("%s: Validate passed", name)
		}
		if strings.Contains(err.Error(), body) || strings.Contains(err.Error(), "tail") {
			t.Fatalf("%s: the error holds the key: %v", name, err)
		}
	}
}

// TestMaxMTUIsMeshs: a stock member's largest MTU is the one meshd's own
// Nebula takes (both v1.12.0's overlay.MaxMTU).
func TestMaxMTUIsMeshs(t *testing.T) {
	if MaxMTU != mesh.MaxMTU {
		t.Fatalf("nebulabundle.MaxMTU %d, mesh.MaxMTU %d", MaxMTU, mesh.MaxMTU)
	}
}
