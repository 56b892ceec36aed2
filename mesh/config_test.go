package mesh

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Config)
		field string // "" means valid
	}{
		{"ok/worker", func(*Config) {}, ""},
		{"ok/lighthouse", func(c *Config) { c.AmLighthouse = true }, ""},
		{"ok/userspace-without-tun-dev", func(c *Config) { c.Userspace, c.TunDev = true, "" }, ""},
		{"ok/port-0-worker", func(c *Config) { c.ListenPort = 0 }, ""},
		{"ok/ipv6-listen", func(c *Config) { c.ListenHost = "::" }, ""},
		{"ok/ca-bundle", func(c *Config) { c.CACert = []byte(fakeCA + fakeCA) }, ""},
		{"ok/mtu-range", func(c *Config) { c.MTU = 576 }, ""},
		{"ok/mtu-jumbo", func(c *Config) { c.MTU = MaxMTU }, ""},
		{"fail/mtu-past-nebulas-cap", func(c *Config) { c.MTU = 9001 }, "MTU"},
		{"ok/routines-max", func(c *Config) { c.Routines = MaxRoutines }, ""},
		{"fail/no-ca", func(c *Config) { c.CACert = nil }, "CACert"},
		{"fail/ca-is-key", func(c *Config) { c.CACert = []byte(fakeKey) }, "CACert"},
		{"fail/two-certs", func(c *Config) { c.Cert = []byte(fakeCert + fakeCert) }, "Cert"},
		{"fail/cert-garbage-after", func(c *Config) { c.Cert = []byte(fakeCert + "junk") }, "Cert"},
		{"fail/key-is-cert", func(c *Config) { c.Key = []byte(fakeCert) }, "Key"},
		{"fail/cert-does-not-parse", func(c *Config) { c.Cert = []byte(fakeCert) }, "Cert"},
		{"fail/listen-host-name", func(c *Config) { c.ListenHost = "localhost" }, "ListenHost"},
		{"fail/listen-host-empty", func(c *Config) { c.ListenHost = "" }, "ListenHost"},
		{"fail/port-range", func(c *Config) { c.ListenPort = 70000 }, "ListenPort"},
		{"fail/lighthouse-port-0", func(c *Config) { c.AmLighthouse, c.ListenPort = true, 0 }, "ListenPort"},
		{"fail/lighthouse-no-ip", func(c *Config) { c.Lighthouses[0].OverlayIP = netip.Addr{} }, "Lighthouses[0].OverlayIP"},
		{"fail/lighthouse-twice", func(c *Config) { c.Lighthouses[1].OverlayIP = c.Lighthouses[0].OverlayIP }, "Lighthouses[1].OverlayIP"},
		{"fail/lighthouse-no-underlay", func(c *Config) { c.Lighthouses[0].Underlay = nil }, "Lighthouses[0].Underlay"},
		{"fail/underlay-port-0", func(c *Config) { c.Lighthouses[1].Underlay = []netip.AddrPort{ap("192.0.2.1:0")} }, "Lighthouses[1].Underlay"},
		{"fail/static-empty", func(c *Config) { c.StaticHosts[ip("10.42.0.50")] = nil }, "StaticHosts[10.42.0.50]"},
		{"fail/blocklist-not-hex", func(c *Config) { c.Blocklist = []string{"not-a-fingerprint"} }, "Blocklist[0]"},
		{"fail/blocklist-upper-case", func(c *Config) { c.Blocklist = []string{strings.ToUpper(fpB)} }, "Blocklist[0]"},
		{"fail/blocklist-short", func(c *Config) { c.Blocklist = []string{fpA[:62]} }, "Blocklist[0]"},
		{"fail/tun-dev-empty", func(c *Config) { c.TunDev = "" }, "TunDev"},
		{"fail/tun-dev-long", func(c *Config) { c.TunDev = "meshd0123456789ab" }, "TunDev"},
		{"fail/tun-dev-slash", func(c *Config) { c.TunDev = "a/b" }, "TunDev"},
		{"fail/mtu-zero", func(c *Config) { c.MTU = 0 }, "MTU"},
		{"fail/mtu-575", func(c *Config) { c.MTU = 575 }, "MTU"},
		{"fail/mtu-9002", func(c *Config) { c.MTU = 9002 }, "MTU"},
		{"fail/routines-zero", func(c *Config) { c.Routines = 0 }, "Routines"},
		{"fail/routines-too-many", func(c *Config) { c.Routines = MaxRoutines + 1 }, "Routines"},
		{"fail/socket-buffer", func(c *Config) { c.SocketBuffer = -1 }, "SocketBuffer"},
		{"fail/allow-list", func(c *Config) { c.LocalAllowList = []netip.Prefix{{}} }, "LocalAllowList[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := goldenWorker(t)
			tc.edit(&c)
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if codes.Of(err) != codes.ConfigInvalid {
				t.Fatalf("want %s, got %v (code %q)", codes.ConfigInvalid, err, codes.Of(err))
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("want field %s, got %v", tc.field, err)
			}
			for _, secret := range []string{"bWVzaGQ", "-----BEGIN"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows PEM: %v", err)
				}
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.ListenHost != "0.0.0.0" || c.ListenPort != 4242 || c.TunDev != "meshd0" || c.MTU != 1300 || c.Routines != 1 || c.SocketBuffer != 8<<20 {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	if c.Userspace || c.AmLighthouse || c.Fast {
		t.Errorf("DefaultConfig() turns on a mode: %+v", c)
	}
}

func TestRestartFields(t *testing.T) {
	base := goldenWorker(t)
	cases := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"reloadable/peers-blocklist-mtu-buffers", func(c *Config) {
			c.Lighthouses, c.StaticHosts, c.Blocklist = nil, nil, []string{fpA}
			c.MTU, c.SocketBuffer, c.LocalAllowList = 1400, 0, nil
			c.Relays = []netip.Addr{ip("10.42.0.7")}
		}, nil},
		{"reloadable/same-host-spelled-differently", func(c *Config) { c.ListenHost = "::ffff:0.0.0.0" }, nil},
		{"restart/port", func(c *Config) { c.ListenPort = 4243 }, []string{"ListenPort"}},
		{"restart/host", func(c *Config) { c.ListenHost = "192.0.2.1" }, []string{"ListenHost"}},
		{"restart/tun-dev", func(c *Config) { c.TunDev = "meshd1" }, []string{"TunDev"}},
		{"restart/role", func(c *Config) { c.AmLighthouse = true }, []string{"AmLighthouse"}},
		{"restart/relay", func(c *Config) { c.AmRelay = true }, []string{"AmRelay"}},
		{"restart/userspace", func(c *Config) { c.Userspace = true }, []string{"Userspace"}},
		{"restart/timers", func(c *Config) { c.Fast = true }, []string{"Fast"}},
		{"restart/routines", func(c *Config) { c.Routines = 2 }, []string{"Routines"}},
		{"restart/offloads", func(c *Config) { c.Offloads = !c.Offloads }, []string{"Offloads"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next := goldenWorker(t)
			tc.edit(&next)
			if got := restartFields(base, next); !slices.Equal(got, tc.want) {
				t.Errorf("restartFields = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWithoutSelf(t *testing.T) {
	c := goldenWorker(t)
	got := c.withoutSelf(ip("10.42.0.1"))
	if len(got.Lighthouses) != 1 || got.Lighthouses[0].OverlayIP != ip("10.42.0.2") {
		t.Errorf("lighthouses = %v", got.Lighthouses)
	}
	if _, ok := got.StaticHosts[ip("10.42.0.1")]; ok || len(got.StaticHosts) != 2 {
		t.Errorf("static hosts = %v", got.StaticHosts)
	}
	if !slices.Equal(got.Relays, []netip.Addr{ip("10.42.0.2"), ip("10.42.0.2")}) {
		t.Errorf("relays = %v, want 10.42.0.2 only (its own address dropped)", got.Relays)
	}
	if len(c.Lighthouses) != 2 || len(c.StaticHosts) != 3 || len(c.Relays) != 3 {
		t.Error("withoutSelf modified its receiver")
	}
}

func TestInspect(t *testing.T) {
	ca := testCA(t)
	certPEM, keyPEM := hostCert(t, ca, "node", 7)
	_, otherKey := hostCert(t, ca, "other", 8)
	foreign := testCA(t)
	foreignCert, foreignKey := hostCert(t, foreign, "intruder", 7)

	oldCA, err := pki.NewCA("old", overlayNet, time.Now().Add(-48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	oldKeys, err := pki.NewKeys("old")
	if err != nil {
		t.Fatal(err)
	}
	expired, err := oldCA.SignNebula(pki.NebulaRequest{PublicKey: oldKeys.NebulaPublicPEM, Name: "old", IP: overlayIP(7), Lifetime: time.Hour},
		time.Now().Add(-47*time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	good := userspaceConfig(ca, certPEM, keyPEM)
	id, err := inspect(good, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if id.ip != ip("10.42.0.7") || id.network != overlayNet || id.fingerprint != fingerprint(t, certPEM) {
		t.Errorf("inspect = %+v", id)
	}

	for name, c := range map[string]Config{
		"foreign-ca":   userspaceConfig(ca, foreignCert, foreignKey),
		"wrong-key":    userspaceConfig(ca, certPEM, otherKey),
		"expired":      userspaceConfig(oldCA, expired, oldKeys.NebulaKeyPEM),
		"blocklisted":  func() Config { c := good; c.Blocklist = []string{id.fingerprint}; return c }(),
		"ca-as-cert":   userspaceConfig(ca, ca.NebulaCertPEM(), keyPEM),
		"cert-as-ca":   func() Config { c := good; c.CACert = certPEM; return c }(),
		"garbage-cert": func() Config { c := good; c.Cert = []byte(fakeCert); return c }(),
	} {
		if _, err := inspect(c, time.Now()); err == nil {
			t.Errorf("%s: inspect accepted it", name)
		} else if strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%s: error shows the key: %v", name, err)
		}
	}
}

func TestLogBridge(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	defaultBefore := slog.Default()
	ll, bridge := newNebulaLogger(log)

	ll.Error("boom", "key", "-----BEGIN NEBULA X25519 PRIVATE KEY-----\nsecret\n")
	ll.Info("chatty") // info is slog debug: hidden at warn
	ll.Error("Failed to set listen.read_buffer", "error", errors.New("EPERM"))
	ll.Info("Nebula interface is active", "udpAddr", netip.MustParseAddrPort("127.0.0.1:4711"))

	out := buf.String()
	if strings.Contains(out, "secret") || !strings.Contains(out, "key=[redacted]") {
		t.Errorf("PEM not redacted:\n%s", out)
	}
	if strings.Contains(out, "chatty") {
		t.Errorf("info shown at warn:\n%s", out)
	}
	if !strings.Contains(out, `level=WARN msg="Failed to set listen.read_buffer"`) {
		t.Errorf("socket buffer error not downgraded:\n%s", out)
	}
	if got := bridge.udpAddr(); got != netip.MustParseAddrPort("127.0.0.1:4711") {
		t.Errorf("udpAddr = %v", got)
	}

	done := bridge.capture()
	ll.Error("Failed to reload PKI from config", "error", errors.New("networks differ"))
	ll.Info("not captured")
	if got := done(); len(got) != 1 || got[0] != "Failed to reload PKI from config: networks differ" {
		t.Errorf("captured %q", got)
	}
	ll.Error("after capture")
	if got := bridge.capture()(); len(got) != 0 {
		t.Errorf("captured outside a capture: %q", got)
	}
	if slog.Default() != defaultBefore {
		t.Error("the bridge touched slog's default logger")
	}
}
