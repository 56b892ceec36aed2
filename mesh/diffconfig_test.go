package mesh

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestDiffConfig: which changes Reload applies as a delta, and what the
// delta holds: the static_host_map entries as Render merges them, the
// own address ignored; any other field sends Reload to the full reload.
func TestDiffConfig(t *testing.T) {
	self, lhIP, p, q := overlayIP(1).Addr(), overlayIP(2).Addr(), overlayIP(3).Addr(), overlayIP(4).Addr()
	fp1, fp2 := "aa"+strings.Repeat("0", 62), "bb"+strings.Repeat("0", 62)
	old := Config{
		Lighthouses: []Lighthouse{{OverlayIP: lhIP, Underlay: []netip.AddrPort{ap("192.0.2.2:4242")}}},
		StaticHosts: map[netip.Addr][]netip.AddrPort{p: {ap("192.0.2.3:4242")}},
		Blocklist:   []string{fp1},
		Inbound:     AnyAny(),
	}
	change := func(f func(c *Config)) Config {
		c := old.withoutSelf(netip.Addr{})
		c.Lighthouses, c.Blocklist = slices.Clone(old.Lighthouses), slices.Clone(old.Blocklist)
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name   string
		next   Config
		ok     bool
		static map[netip.Addr][]netip.AddrPort
		check  func(d delta) bool
	}{
		{"nothing", change(func(c *Config) {}), true, nil, delta.empty},
		{"own entries only", change(func(c *Config) {
			c.StaticHosts[self] = []netip.AddrPort{ap("192.0.2.1:4242")}
			c.Lighthouses = append(c.Lighthouses, Lighthouse{OverlayIP: self, Underlay: []netip.AddrPort{ap("192.0.2.1:4242")}})
		}), true, nil, delta.empty},
		{"peer added", change(func(c *Config) { c.StaticHosts[q] = []netip.AddrPort{ap("192.0.2.4:4242")} }), true,
			map[netip.Addr][]netip.AddrPort{q: {ap("192.0.2.4:4242")}}, nil},
		{"peer removed", change(func(c *Config) { delete(c.StaticHosts, p) }), true,
			map[netip.Addr][]netip.AddrPort{p: nil}, nil},
		{"lighthouse moved", change(func(c *Config) { c.Lighthouses[0].Underlay = []netip.AddrPort{ap("[::ffff:192.0.2.9]:4242")} }), true,
			map[netip.Addr][]netip.AddrPort{lhIP: {ap("192.0.2.9:4242")}}, func(d delta) bool { return d.lighthouses }},
		{"lighthouse also a static host", change(func(c *Config) { c.StaticHosts[lhIP] = []netip.AddrPort{ap("192.0.2.8:4242")} }), true,
			map[netip.Addr][]netip.AddrPort{lhIP: {ap("192.0.2.2:4242"), ap("192.0.2.8:4242")}}, func(d delta) bool { return !d.lighthouses }},
		{"blocked and unblocked", change(func(c *Config) { c.Blocklist = []string{fp2} }), true, nil,
			func(d delta) bool {
				return slices.Equal(d.block, []string{fp2}) && slices.Equal(d.unblock, []string{fp1})
			}},
		{"relay", change(func(c *Config) { c.Relays = []netip.Addr{q, self} }), true, nil, func(d delta) bool { return d.relays }},
		{"roaming", change(func(c *Config) { c.Roaming = []netip.Addr{q} }), true, nil, func(d delta) bool { return d.roaming }},
		{"firewall", change(func(c *Config) { c.Inbound = nil }), false, nil, nil},
		{"unsafe route", change(func(c *Config) { c.UnsafeRoutes = []UnsafeRoute{{Route: pfx("192.168.1.0/24"), Via: p}} }), false, nil, nil},
		{"certificate", change(func(c *Config) { c.Cert = []byte("x") }), false, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := diffConfig(old, tc.next, self)
			if ok != tc.ok {
				t.Fatalf("delta only = %t, want %t", ok, tc.ok)
			}
			if !ok {
				return
			}
			if len(d.static) != len(tc.static) {
				t.Fatalf("static entries %v, want %v", d.static, tc.static)
			}
			for ip, want := range tc.static {
				if got, has := d.static[ip]; !has || !slices.Equal(got, want) {
					t.Fatalf("static entry %s = %v, want %v (all: %v)", ip, got, want, d.static)
				}
			}
			if tc.check != nil && !tc.check(d) {
				t.Fatalf("delta %+v", d)
			}
		})
	}
}
