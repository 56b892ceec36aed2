package mesh

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
)

// hostAddrs lists this machine's interface addresses, read independently of
// localAddrs; up reports whether the interface is up.
func hostAddrs(t *testing.T) map[netip.Addr]bool {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]bool{}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			out[pfx.Addr().Unmap()] = ifc.Flags&net.FlagUp != 0
		}
	}
	return out
}

// anAssignedIPv4 returns a non-loopback IPv4 address of this machine, if any.
func anAssignedIPv4(t *testing.T) (netip.Addr, bool) {
	t.Helper()
	for ip := range hostAddrs(t) {
		if ip.Is4() && !ip.IsLoopback() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func TestChooseUnderlayPinned(t *testing.T) {
	tests := []struct {
		name     string
		pin      Pin
		want     netip.Addr // checked when wantCode is ""
		wantCode codes.Code
	}{
		{"ok/loopback", Pin{Addr: "127.0.0.1"}, netip.MustParseAddr("127.0.0.1"), ""},
		{"ok/any-127-8", Pin{Addr: "127.77.3.4"}, netip.MustParseAddr("127.77.3.4"), ""},
		{"ok/ipv6-loopback", Pin{Addr: "::1"}, netip.MustParseAddr("::1"), ""},
		{"ok/4in6-loopback-unmapped", Pin{Addr: "::ffff:127.0.0.5"}, netip.MustParseAddr("127.0.0.5"), ""},
		{"ok/iface-lo", Pin{Iface: "lo"}, netip.MustParseAddr("127.0.0.1"), ""},
		{"ok/iface-lo-and-its-address", Pin{Iface: "lo", Addr: "127.0.0.1"}, netip.MustParseAddr("127.0.0.1"), ""},
		{"fail/not-on-this-machine", Pin{Addr: "203.0.113.9"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/not-an-ip", Pin{Addr: "not-an-ip"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/hostname", Pin{Addr: "localhost"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/with-port", Pin{Addr: "127.0.0.1:7946"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/unspecified-v4", Pin{Addr: "0.0.0.0"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/unspecified-v6", Pin{Addr: "::"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/no-such-iface", Pin{Iface: "nosuchif0"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/address-not-on-the-iface", Pin{Iface: "lo", Addr: "127.0.0.2"}, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/iface-and-bad-address", Pin{Iface: "lo", Addr: "lo"}, netip.Addr{}, codes.AdvertiseAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A pin decides whatever the seeds' routes say.
			got, err := ChooseUnderlay(tt.pin, []netip.Addr{netip.MustParseAddr("127.0.0.1")})
			if c := codes.Of(err); c != tt.wantCode {
				t.Fatalf("ChooseUnderlay(%+v) = %v, %v (code %q), want code %q", tt.pin, got, err, c, tt.wantCode)
			}
			if tt.wantCode == "" && (got.Addr != tt.want || !strings.Contains(got.Why, "pinned")) {
				t.Fatalf("ChooseUnderlay(%+v) = %+v, want %v, pinned", tt.pin, got, tt.want)
			}
			if tt.wantCode != "" && got.Addr.IsValid() {
				t.Fatalf("ChooseUnderlay(%+v) returned %v with its error", tt.pin, got)
			}
		})
	}
	t.Run("ok/assigned-address", func(t *testing.T) {
		ip, ok := anAssignedIPv4(t)
		if !ok {
			t.Skip("no non-loopback IPv4 address on this machine")
		}
		got, err := ChooseUnderlay(Pin{Addr: ip.String()}, nil)
		if err != nil || got.Addr != ip {
			t.Fatalf("ChooseUnderlay(%q) = %v, %v (code %q)", ip, got, err, codes.Of(err))
		}
	})
}

// kernelSource is the source address the kernel picks to reach dst, read
// independently of netlink: a connected UDP socket's local address (no
// packet is sent).
func kernelSource(dst netip.Addr) (netip.Addr, bool) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, false
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), true
}

// TestChooseUnderlayBySeedRoute: a joiner advertises the source address of
// the kernel's route to the first seed that has one, and says so.
func TestChooseUnderlayBySeedRoute(t *testing.T) {
	for _, seeds := range [][]string{{"127.0.0.1"}, {"127.77.3.4"}, {"203.0.113.9"}, {"198.51.100.7", "127.0.0.1"}} {
		t.Run(strings.Join(seeds, ","), func(t *testing.T) {
			var ips []netip.Addr
			for _, s := range seeds {
				ips = append(ips, netip.MustParseAddr(s))
			}
			got, err := ChooseUnderlay(Pin{}, ips)
			want, routed := kernelSource(ips[0])
			if !routed {
				if err == nil && strings.Contains(got.Why, "route to seed "+seeds[0]) {
					t.Fatalf("no route to %s, yet %+v", seeds[0], got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ChooseUnderlay(%v) = %v (code %q)", seeds, err, codes.Of(err))
			}
			if got.Addr != want {
				t.Fatalf("ChooseUnderlay(%v) = %v, the kernel's source address to %s is %v", seeds, got.Addr, seeds[0], want)
			}
			if !strings.Contains(got.Why, "route to seed "+seeds[0]) || !strings.Contains(got.Route, "src "+want.String()) {
				t.Fatalf("ChooseUnderlay(%v) explains itself as %q (route %q)", seeds, got.Why, got.Route)
			}
		})
	}
}

// TestChooseUnderlayInit: without seeds (init) the choice is the default
// route's interface address, or, without a default route, the fallback,
// which says why.
func TestChooseUnderlayInit(t *testing.T) {
	host := hostAddrs(t)
	got, err := ChooseUnderlay(Pin{}, nil)
	if err != nil {
		if c := codes.Of(err); c != codes.AdvertiseAddr {
			t.Fatalf("ChooseUnderlay = %v (code %q)", err, c)
		}
		return
	}
	if up, ok := host[got.Addr]; !ok || !up {
		t.Fatalf("chose %v, which is not on an up interface of this machine", got.Addr)
	}
	switch {
	case got.Route != "":
		if !strings.HasPrefix(got.Route, "default") || !strings.Contains(got.Why, "default route") {
			t.Fatalf("chose %+v: a route, but not the default route", got)
		}
	case !strings.Contains(got.Why, "no default route") && !strings.Contains(got.Why, "default route:"):
		t.Fatalf("chose %+v without a route and without saying why", got)
	}
	again, err := ChooseUnderlay(Pin{}, nil)
	if err != nil || again != got {
		t.Fatalf("second choice %+v, %v differs from the first, %+v", again, err, got)
	}
}

// TestFirstUsable: the fallback prefers private IPv4 addresses of up
// interfaces and is deterministic.
func TestFirstUsable(t *testing.T) {
	host := hostAddrs(t)
	var usable, private bool
	for ip, up := range host {
		if up && ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			usable = true
			private = private || ip.IsPrivate()
		}
	}
	got, err := firstUsable()
	if !usable {
		if err == nil {
			t.Fatalf("no usable address, yet firstUsable = %v", got)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if up, ok := host[got]; !ok || !up || !got.Is4() || got.IsLoopback() || got.IsLinkLocalUnicast() {
		t.Fatalf("chose %v: want a non-loopback, non-link-local IPv4 address of an up interface", got)
	}
	if private && !got.IsPrivate() {
		t.Fatalf("chose public %v over a private address", got)
	}
}

func TestIsLocal(t *testing.T) {
	tests := []struct {
		name string
		ip   netip.Addr
		want bool
	}{
		{"ok/loopback", netip.MustParseAddr("127.0.0.1"), true},
		{"ok/any-127-8", netip.MustParseAddr("127.77.3.4"), true},
		{"ok/ipv6-loopback", netip.MustParseAddr("::1"), true},
		{"fail/documentation-address", netip.MustParseAddr("203.0.113.9"), false},
		{"fail/invalid", netip.Addr{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsLocal(tt.ip); got != tt.want {
				t.Fatalf("IsLocal(%v) = %v, want %v", tt.ip, got, tt.want)
			}
		})
	}
	t.Run("ok/assigned-address", func(t *testing.T) {
		ip, ok := anAssignedIPv4(t)
		if !ok {
			t.Skip("no non-loopback IPv4 address on this machine")
		}
		if !IsLocal(ip) {
			t.Fatalf("IsLocal(%v) = false for an address of this machine", ip)
		}
	})
}
