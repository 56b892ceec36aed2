package hostroute

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/vishvananda/netlink"
)

// TestUseExitAndOff gives namespace "exit" an underlay (eth0,
// 192.0.2.2/24, default route via 192.0.2.1 in namespace "gw") and a TUN
// device meshd0 (10.42.0.5/16; no process holds it, so its link is down,
// which routes ignore), then checks where the kernel sends traffic under
// UseExit, that a second UseExit with other exclusions matches them
// exactly, and that ExitOff leaves routes and rules exactly as before.
func TestUseExitAndOff(t *testing.T) {
	needRoot(t)
	ns, gw := newNS(t, "exit"), newNS(t, "gw")
	for _, c := range [][]string{
		{"ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "gw0", "netns", gw},
		{"ip", "-n", ns, "tuntap", "add", "dev", "meshd0", "mode", "tun"},
		{"ip", "-n", ns, "addr", "add", "192.0.2.2/24", "dev", "eth0"},
		{"ip", "-n", ns, "addr", "add", "10.42.0.5/16", "dev", "meshd0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "link", "set", "meshd0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", "192.0.2.1"},
		{"ip", "-n", gw, "addr", "add", "192.0.2.1/24", "dev", "gw0"},
		{"ip", "-n", gw, "link", "set", "gw0", "up"},
	} {
		run(t, c...)
	}
	before := snapshot(t, ns)

	e := Exit{
		TunDev: "meshd0", Mark: 0x5a, Table: 52742, Priority: 5274,
		Exclude: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")},
	}
	h := New()
	for range 2 { // the second is a no-op
		in(t, ns, func() {
			if err := h.UseExit(e); err != nil {
				t.Fatalf("UseExit: %v", err)
			}
		})
	}
	wantTable(t, ns, "default dev meshd0", "throw 198.51.100.7")
	wantExitRules(t, ns)
	in(t, ns, func() {
		wantRoute(t, "8.8.8.8", 0, "meshd0", "")
		wantRoute(t, "8.8.8.8", 0x5a, "eth0", "192.0.2.1") // Nebula's own packets
		wantRoute(t, "198.51.100.7", 0, "eth0", "192.0.2.1")
		wantRoute(t, "192.0.2.50", 0, "eth0", "") // the LAN
		wantRoute(t, "10.42.0.9", 0, "meshd0", "")
	})

	e.Exclude = []netip.Prefix{netip.MustParsePrefix("198.51.100.8/32"), netip.MustParsePrefix("203.0.113.0/24")}
	in(t, ns, func() {
		if err := h.UseExit(e); err != nil {
			t.Fatalf("UseExit with other exclusions: %v", err)
		}
	})
	wantTable(t, ns, "default dev meshd0", "throw 198.51.100.8", "throw 203.0.113.0/24")
	wantExitRules(t, ns)
	in(t, ns, func() {
		wantRoute(t, "198.51.100.7", 0, "meshd0", "")
		wantRoute(t, "198.51.100.8", 0, "eth0", "192.0.2.1")
		wantRoute(t, "203.0.113.9", 0, "eth0", "192.0.2.1")
	})

	in(t, ns, func() {
		for name, c := range map[string]Exit{
			"fail/priority-after-main": {TunDev: "meshd0", Mark: 0x5a, Table: 52742, Priority: 52740},
			"fail/main-table":          {TunDev: "meshd0", Mark: 0x5a, Table: 254, Priority: 5274},
			"fail/no-mark":             {TunDev: "meshd0", Table: 52742, Priority: 5274},
			"fail/ipv6":                {TunDev: "meshd0", Mark: 0x5a, Table: 52742, Priority: 5274, Exclude: []netip.Prefix{netip.MustParsePrefix("2001:db8::1/128")}},
		} {
			if err := h.UseExit(c); codes.Of(err) != codes.HostRouteInvalid {
				t.Errorf("%s: UseExit = %v, want %s", name, err, codes.HostRouteInvalid)
			}
		}
		if err := h.UseExit(Exit{TunDev: "nosuch0", Mark: 0x5a, Table: 52742, Priority: 5274}); codes.Of(err) != codes.HostRouteApply {
			t.Errorf("fail/no-tun: UseExit = %v, want %s", err, codes.HostRouteApply)
		}
	})
	wantTable(t, ns, "default dev meshd0", "throw 198.51.100.8", "throw 203.0.113.0/24")

	for range 2 { // the second has nothing to do
		in(t, ns, func() {
			if err := h.ExitOff(e); err != nil {
				t.Fatalf("ExitOff: %v", err)
			}
		})
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("routes and rules after ExitOff differ from before UseExit:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// snapshot is every IPv4 route of every table and every rule of ns, as ip
// prints them in JSON.
func snapshot(t *testing.T, ns string) string {
	t.Helper()
	return strings.Join([]string{
		run(t, "ip", "-n", ns, "-4", "-j", "route", "show", "table", "all"),
		run(t, "ip", "-n", ns, "-4", "-j", "rule", "show"),
		run(t, "ip", "-n", ns, "-6", "-j", "rule", "show"),
	}, "\n")
}

// wantTable checks, with ip, that table 52742 of ns holds exactly want
// ("default dev IF", "throw DST").
func wantTable(t *testing.T, ns string, want ...string) {
	t.Helper()
	var rs []struct{ Type, Dst, Dev string }
	out := run(t, "ip", "-n", ns, "-4", "-j", "route", "show", "table", "52742")
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("ip -j route: %v\n%s", err, out)
	}
	var got []string
	for _, r := range rs {
		s := r.Dst
		if r.Type != "" {
			s = r.Type + " " + s
		}
		if r.Dev != "" {
			s += " dev " + r.Dev
		}
		got = append(got, s)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("table 52742 holds %q, want %q", got, want)
	}
}

// wantExitRules checks, with ip, that ns has exactly UseExit's two rules at
// 5274 and 5275, once each.
func wantExitRules(t *testing.T, ns string) {
	t.Helper()
	var got []string
	for _, l := range strings.Split(run(t, "ip", "-n", ns, "-4", "rule", "show"), "\n") {
		if strings.HasPrefix(l, "5274:") || strings.HasPrefix(l, "5275:") {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
	}
	want := []string{
		"5274: from all lookup main suppress_prefixlength 0",
		"5275: not from all fwmark 0x5a lookup 52742",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules %q, want %q", got, want)
	}
}

// wantRoute checks the kernel's route to dst (with fwmark mark) from the
// calling thread's namespace: out of dev, via gw ("" for none).
func wantRoute(t *testing.T, dst string, mark uint32, dev, gw string) {
	t.Helper()
	rs, err := netlink.RouteGetWithOptions(net.ParseIP(dst), &netlink.RouteGetOptions{Mark: mark})
	if err != nil || len(rs) == 0 {
		t.Errorf("route get %s mark %#x: %v", dst, mark, err)
		return
	}
	l, err := netlink.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		t.Errorf("route get %s: link %d: %v", dst, rs[0].LinkIndex, err)
		return
	}
	gotGw := ""
	if rs[0].Gw != nil {
		gotGw = rs[0].Gw.String()
	}
	if l.Attrs().Name != dev || gotGw != gw {
		t.Errorf("route get %s mark %#x: dev %s via %q, want dev %s via %q", dst, mark, l.Attrs().Name, gotGw, dev, gw)
	}
}
