package mesh

import (
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/slackhq/nebula/config"
	"github.com/slackhq/nebula/overlay"

	"github.com/meshd/meshd/codes"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestRenderUnsafeRoutes reads goldenRoutes' tun.unsafe_routes back with
// Nebula's own parser and route table (a TUN device built on a pipe, which
// parses the routes as a kernel device does without needing one): each
// prefix goes to its Via, sorted by route, install as configured.
func TestRenderUnsafeRoutes(t *testing.T) {
	c := goldenRoutes(t)
	nc := readByNebula(t, c)

	raw, ok := nc.Get("tun.unsafe_routes").([]any)
	if !ok || len(raw) != 3 {
		t.Fatalf("tun.unsafe_routes = %#v, want 3 entries", nc.Get("tun.unsafe_routes"))
	}
	want := []map[string]any{
		{"route": "0.0.0.0/0", "via": "10.42.0.10", "install": false},
		{"route": "172.16.0.0/12", "via": "10.42.0.9", "install": true, "metric": UnsafeRouteMetric},
		{"route": "192.168.60.0/24", "via": "10.42.0.9", "install": true, "metric": UnsafeRouteMetric},
	}
	for i, w := range want {
		got, _ := raw[i].(map[string]any)
		if len(got) != len(w) {
			t.Errorf("entry %d = %v, want exactly the keys of %v", i, got, w)
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("entry %d: %s = %#v, want %#v", i, k, got[k], v)
			}
		}
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fd := int(r.Fd())
	dev, err := overlay.NewFdDeviceFromConfig(&fd)(nc, slog.New(slog.DiscardHandler), []netip.Prefix{pfx("10.42.0.5/16")}, 1)
	if err != nil {
		t.Fatalf("Nebula refuses the rendered unsafe routes: %v", err)
	}
	defer dev.Close()
	for dst, via := range map[string]string{
		"192.168.60.7": "10.42.0.9",  // the /24
		"172.20.1.1":   "10.42.0.9",  // the /12
		"192.168.50.7": "10.42.0.10", // carried by this node itself: only the exit route covers it
		"8.8.8.8":      "10.42.0.10", // the exit node
	} {
		gws := dev.RoutesFor(ip(dst))
		if len(gws) != 1 || gws[0].Addr() != ip(via) {
			t.Errorf("Nebula routes %s via %v, want %s", dst, gws, via)
		}
	}

	// Without routes the key is absent; in userspace mode the tun section
	// holds only the routes (no device is created from it).
	c.UnsafeRoutes = nil
	if nc := readByNebula(t, c); nc.Get("tun.unsafe_routes") != nil || nc.GetString("tun.dev", "") != DefaultTunDev {
		t.Errorf("no routes: tun = %v", nc.Get("tun"))
	}
	us := goldenCases(t)["userspace"]
	us.UnsafeRoutes = []UnsafeRoute{{Route: pfx("192.168.60.0/24"), Via: ip("10.42.0.1"), Install: true}}
	nc = readByNebula(t, us)
	if tun, _ := nc.Get("tun").(map[string]any); len(tun) != 1 || tun["unsafe_routes"] == nil {
		t.Errorf("userspace with routes: tun = %v, want unsafe_routes only", nc.Get("tun"))
	}
}

func TestRenderSoMark(t *testing.T) {
	c := goldenWorker(t)
	if nc := readByNebula(t, c); nc.Get("listen.so_mark") != nil {
		t.Errorf("SoMark 0 renders listen.so_mark %v", nc.Get("listen.so_mark"))
	}
	c.SoMark = math.MaxInt32
	if got := readByNebula(t, c).GetInt("listen.so_mark", 0); got != math.MaxInt32 {
		t.Errorf("listen.so_mark = %d, want %d", got, math.MaxInt32)
	}
}

// TestValidateRoutes: each bad unsafe route or mark is refused with
// codes.ConfigInvalid naming the field. The node is 10.42.0.5/16 and its
// certificate carries 192.168.50.0/24.
func TestValidateRoutes(t *testing.T) {
	route := func(r, via string, install bool) UnsafeRoute {
		return UnsafeRoute{Route: pfx(r), Via: ip(via), Install: install}
	}
	cases := []struct {
		name   string
		routes []UnsafeRoute
		mark   int
		field  string // "" means valid
	}{
		{"ok/none", nil, 0, ""},
		{"ok/lan-and-exit", []UnsafeRoute{route("192.168.60.0/24", "10.42.0.9", true), route("0.0.0.0/0", "10.42.0.10", false)}, 0, ""},
		{"ok/nested", []UnsafeRoute{route("192.168.60.0/24", "10.42.0.9", true), route("192.168.60.128/25", "10.42.0.10", true)}, 0, ""},
		{"ok/mark-max", nil, math.MaxInt32, ""},
		{"fail/route-invalid", []UnsafeRoute{{Via: ip("10.42.0.9")}}, 0, "UnsafeRoutes[0].Route"},
		{"fail/route-unmasked", []UnsafeRoute{route("192.168.60.1/24", "10.42.0.9", true)}, 0, "UnsafeRoutes[0].Route"},
		{"fail/route-ipv6", []UnsafeRoute{route("fd00:60::/64", "10.42.0.9", true)}, 0, "UnsafeRoutes[0].Route"},
		{"fail/route-inside-overlay", []UnsafeRoute{route("10.42.9.0/24", "10.42.0.9", true)}, 0, "UnsafeRoutes[0].Route"},
		{"fail/route-is-overlay", []UnsafeRoute{route("10.42.0.0/16", "10.42.0.9", true)}, 0, "UnsafeRoutes[0].Route"},
		{"fail/route-contains-overlay", []UnsafeRoute{route("10.0.0.0/8", "10.42.0.9", true)}, 0, "UnsafeRoutes[0].Route"},
		{"fail/route-twice", []UnsafeRoute{route("192.168.60.0/24", "10.42.0.9", true), route("192.168.60.0/24", "10.42.0.10", true)}, 0, "UnsafeRoutes[1].Route"},
		{"fail/route-carried-here", []UnsafeRoute{route("192.168.50.0/24", "10.42.0.9", true)}, 0, "UnsafeRoutes[0].Route"},
		{"fail/via-missing", []UnsafeRoute{{Route: pfx("192.168.60.0/24")}}, 0, "UnsafeRoutes[0].Via"},
		{"fail/via-outside-overlay", []UnsafeRoute{route("192.168.60.0/24", "192.168.60.1", true)}, 0, "UnsafeRoutes[0].Via"},
		{"fail/via-ipv6", []UnsafeRoute{route("192.168.60.0/24", "fd00::9", true)}, 0, "UnsafeRoutes[0].Via"},
		{"fail/via-self", []UnsafeRoute{route("192.168.60.0/24", "10.42.0.5", true)}, 0, "UnsafeRoutes[0].Via"},
		{"fail/mark-negative", nil, -1, "SoMark"},
		{"fail/mark-too-big", nil, math.MaxInt32 + 1, "SoMark"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := goldenRoutes(t)
			c.UnsafeRoutes, c.SoMark = tc.routes, tc.mark
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ce *ConfigError
			if codes.Of(err) != codes.ConfigInvalid || !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("got %v, want %s naming %s", err, codes.ConfigInvalid, tc.field)
			}
			if _, err := Render(c); codes.Of(err) != codes.ConfigInvalid {
				t.Errorf("Render = %v, want %s", err, codes.ConfigInvalid)
			}
		})
	}
}

// TestRenderFirewallFollowsCertRoutes: which sections of the rendered config a change
// of routes changes, as Nebula's config sees it. A certificate with other
// unsafe networks changes neither the firewall section nor
// tun.unsafe_routes: Nebula (since v1.11) rebuilds its firewall from the
// certificate a reload brings (Interface.reloadFirewall compares its
// networks; TestKernelUnsafeRoutes/certificate-routes-reach-the-firewall
// checks the traffic), where v1.10.3 needed the section to change and
// meshd wrote the networks into it (firewall.meshd_routable, gone). Other
// UnsafeRoutes change tun.unsafe_routes only.
func TestRenderFirewallFollowsCertRoutes(t *testing.T) {
	base := goldenWorker(t)
	withCert := func(routes ...netip.Prefix) Config {
		c := base
		c.Cert = goldenCert(t, routes...)
		return c
	}
	cases := []struct {
		name       string
		from, to   Config
		fwChanged  bool
		tunChanged bool
	}{
		{"route-added", withCert(), withCert(pfx("192.168.50.0/24")), false, false},
		{"route-removed", withCert(pfx("192.168.50.0/24")), withCert(), false, false},
		{"exit-added", withCert(pfx("192.168.50.0/24")), withCert(pfx("192.168.50.0/24"), pfx("0.0.0.0/0")), false, false},
		{"unsafe-routes-only", withCert(), func() Config {
			c := withCert()
			c.UnsafeRoutes = []UnsafeRoute{{Route: pfx("192.168.60.0/24"), Via: ip("10.42.0.9"), Install: true}}
			return c
		}(), false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from, err := Render(tc.from)
			if err != nil {
				t.Fatal(err)
			}
			to, err := Render(tc.to)
			if err != nil {
				t.Fatal(err)
			}
			nc := config.NewC(slog.New(slog.DiscardHandler))
			if err := nc.LoadString(from); err != nil {
				t.Fatal(err)
			}
			if err := nc.ReloadConfigString(to).Err; err != nil {
				t.Fatal(err)
			}
			if got := nc.HasChanged("firewall"); got != tc.fwChanged {
				t.Errorf("Nebula sees the firewall changed: %t, want %t", got, tc.fwChanged)
			}
			if got := nc.HasChanged("tun.unsafe_routes"); got != tc.tunChanged {
				t.Errorf("Nebula sees tun.unsafe_routes changed: %t, want %t", got, tc.tunChanged)
			}
			if nc.IsSet("firewall.meshd_routable") {
				t.Error("Render wrote firewall.meshd_routable, which Nebula 1.11 does not need")
			}
		})
	}
}

func TestRestartFieldsRoutes(t *testing.T) {
	base := goldenRoutes(t)
	next := base
	next.SoMark = 0
	next.UnsafeRoutes = []UnsafeRoute{{Route: pfx("192.168.61.0/24"), Via: ip("10.42.0.10")}}
	next.Cert = goldenCert(t)
	if got := restartFields(base, next); got != nil {
		t.Errorf("restartFields = %v: unsafe routes, mark and the certificate's routes are live", got)
	}
}

func TestFirewallLocalCIDR(t *testing.T) {
	if got := AnyAny(); len(got) != 1 || got[0].LocalCIDR != "any" {
		t.Errorf("AnyAny() = %+v, want local_cidr any: the default also lets members reach routed prefixes", got)
	}
	for _, lc := range []string{"any", "192.168.50.0/24", "0.0.0.0/0", "192.168.50.7/32"} {
		if err := CheckFirewall("inbound", []FirewallRule{{Port: "any", Proto: "any", Host: "any", LocalCIDR: lc}}); err != nil {
			t.Errorf("local_cidr %q: %v", lc, err)
		}
	}
	for _, lc := range []string{"192.168.50.0", "fd00::/8", "lan", " any"} {
		err := CheckFirewall("outbound", []FirewallRule{{Port: "any", Proto: "any", Host: "any", LocalCIDR: lc}})
		var fe *FirewallError
		if codes.Of(err) != codes.FirewallRule || !errors.As(err, &fe) || fe.Field != "outbound[0].local_cidr" {
			t.Errorf("local_cidr %q: got %v, want %s naming outbound[0].local_cidr", lc, err, codes.FirewallRule)
		}
	}
	text, err := Render(goldenRoutes(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "local_cidr: 192.168.50.0/24\n") {
		t.Errorf("local_cidr not rendered:\n%s", text)
	}
}
