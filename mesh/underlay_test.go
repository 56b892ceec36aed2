package mesh

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

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

// anAssignedIPv6 returns a non-loopback, non-link-local IPv6 address of
// this machine, if any.
func anAssignedIPv6(t *testing.T) (netip.Addr, bool) {
	t.Helper()
	for ip := range hostAddrs(t) {
		if ip.Is6() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func TestChooseUnderlayPinned(t *testing.T) {
	v4 := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	v6 := []netip.Addr{netip.MustParseAddr("::1")}
	both := []netip.Addr{netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")}
	tests := []struct {
		name     string
		pin      Pin
		seeds    []netip.Addr
		want     netip.Addr // checked when wantCode is ""
		wantCode codes.Code
	}{
		{"ok/loopback", Pin{Addr: "127.0.0.1"}, v4, netip.MustParseAddr("127.0.0.1"), ""},
		{"ok/any-127-8", Pin{Addr: "127.77.3.4"}, v4, netip.MustParseAddr("127.77.3.4"), ""},
		{"ok/ipv6-loopback", Pin{Addr: "::1"}, v6, netip.MustParseAddr("::1"), ""},
		{"ok/ipv6-loopback-init", Pin{Addr: "::1"}, nil, netip.MustParseAddr("::1"), ""},
		{"ok/ipv6-pin-dual-stack-seeds", Pin{Addr: "::1"}, both, netip.MustParseAddr("::1"), ""},
		{"ok/ipv4-pin-dual-stack-seeds", Pin{Addr: "127.0.0.1"}, both, netip.MustParseAddr("127.0.0.1"), ""},
		{"ok/4in6-loopback-unmapped", Pin{Addr: "::ffff:127.0.0.5"}, v4, netip.MustParseAddr("127.0.0.5"), ""},
		{"ok/iface-lo", Pin{Iface: "lo"}, v4, netip.MustParseAddr("127.0.0.1"), ""},
		{"ok/iface-lo-init", Pin{Iface: "lo"}, nil, netip.MustParseAddr("127.0.0.1"), ""},
		{"ok/iface-lo-and-its-address", Pin{Iface: "lo", Addr: "127.0.0.1"}, v4, netip.MustParseAddr("127.0.0.1"), ""},
		{"fail/not-on-this-machine", Pin{Addr: "203.0.113.9"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/ipv6-not-on-this-machine", Pin{Addr: "2001:db8::9"}, v6, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/ipv6-link-local", Pin{Addr: "fe80::1"}, v6, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/ipv6-zone", Pin{Addr: "fe80::1%lo"}, v6, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/bracketed", Pin{Addr: "[::1]"}, v6, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/bracketed-with-port", Pin{Addr: "[::1]:7300"}, v6, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/not-an-ip", Pin{Addr: "not-an-ip"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/hostname", Pin{Addr: "localhost"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/with-port", Pin{Addr: "127.0.0.1:7946"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/unspecified-v4", Pin{Addr: "0.0.0.0"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/unspecified-v6", Pin{Addr: "::"}, v6, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/no-such-iface", Pin{Iface: "nosuchif0"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/address-not-on-the-iface", Pin{Iface: "lo", Addr: "127.0.0.2"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"fail/iface-and-bad-address", Pin{Iface: "lo", Addr: "lo"}, v4, netip.Addr{}, codes.AdvertiseAddr},
		{"family/ipv4-pin-ipv6-seeds", Pin{Addr: "127.0.0.1"}, v6, netip.Addr{}, codes.UnderlayFamily},
		{"family/ipv6-pin-ipv4-seeds", Pin{Addr: "::1"}, v4, netip.Addr{}, codes.UnderlayFamily},
		{"family/4in6-pin-is-ipv4", Pin{Addr: "::ffff:127.0.0.1"}, v6, netip.Addr{}, codes.UnderlayFamily},
		{"family/iface-address-of-the-wrong-family", Pin{Iface: "lo", Addr: "127.0.0.1"}, v6, netip.Addr{}, codes.UnderlayFamily},
		// The family decides before the address is looked for on this
		// machine: a wrong family is wrong wherever the address is.
		{"order/wrong-family-and-not-local", Pin{Addr: "203.0.113.9"}, v6, netip.Addr{}, codes.UnderlayFamily},
		{"order/not-an-ip-before-family", Pin{Addr: "nope"}, v6, netip.Addr{}, codes.AdvertiseAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A pin decides whatever the seeds' routes say.
			got, err := ChooseUnderlay(tt.pin, tt.seeds)
			if c := codes.Of(err); c != tt.wantCode {
				t.Fatalf("ChooseUnderlay(%+v, %v) = %v, %v (code %q), want code %q", tt.pin, tt.seeds, got, err, c, tt.wantCode)
			}
			if tt.wantCode == "" && (got.Addr != tt.want || !strings.Contains(got.Why, "pinned")) {
				t.Fatalf("ChooseUnderlay(%+v, %v) = %+v, want %v, pinned", tt.pin, tt.seeds, got, tt.want)
			}
			if tt.wantCode != "" && got.Addr.IsValid() {
				t.Fatalf("ChooseUnderlay(%+v, %v) returned %v with its error", tt.pin, tt.seeds, got)
			}
		})
	}
	t.Run("ok/iface-lo-ipv6-seeds", func(t *testing.T) {
		if _, ok := hostAddrs(t)[netip.MustParseAddr("::1")]; !ok {
			t.Skip("lo has no ::1 here")
		}
		got, err := ChooseUnderlay(Pin{Iface: "lo"}, v6)
		if err != nil || got.Addr != netip.MustParseAddr("::1") || !strings.Contains(got.Why, "first IPv6 address") {
			t.Fatalf("ChooseUnderlay(lo, %v) = %+v, %v (code %q), want ::1, its first IPv6 address", v6, got, err, codes.Of(err))
		}
	})
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
	t.Run("ok/assigned-ipv6-address", func(t *testing.T) {
		ip, ok := anAssignedIPv6(t)
		if !ok {
			t.Skip("no non-loopback, non-link-local IPv6 address on this machine")
		}
		got, err := ChooseUnderlay(Pin{Addr: ip.String()}, []netip.Addr{netip.MustParseAddr("2001:db8::1")})
		if err != nil || got.Addr != ip {
			t.Fatalf("ChooseUnderlay(%q) = %v, %v (code %q)", ip, got, err, codes.Of(err))
		}
		if _, err := ChooseUnderlay(Pin{Addr: ip.String()}, []netip.Addr{netip.MustParseAddr("192.0.2.1")}); codes.Of(err) != codes.UnderlayFamily {
			t.Fatalf("IPv6 pin %s against an IPv4 seed: %v (code %q), want %s", ip, err, codes.Of(err), codes.UnderlayFamily)
		}
	})
}

func TestFamiliesFor(t *testing.T) {
	tests := []struct {
		name  string
		seeds []string
		want  []family
	}{
		{"init/ipv4-first", nil, []family{family4, family6}},
		{"ipv4-only", []string{"192.0.2.1", "192.0.2.2"}, []family{family4}},
		{"ipv6-only", []string{"fd99::1", "2001:db8::2"}, []family{family6}},
		{"ipv4-mapped-is-ipv4", []string{"::ffff:192.0.2.1"}, []family{family4}},
		{"dual/first-seed-first", []string{"fd99::1", "192.0.2.1"}, []family{family6, family4}},
		{"dual/ipv4-first", []string{"192.0.2.1", "fd99::1", "fd99::2"}, []family{family4, family6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seeds []netip.Addr
			for _, s := range tt.seeds {
				seeds = append(seeds, netip.MustParseAddr(s))
			}
			if got := familiesFor(seeds); !slices.Equal(got, tt.want) {
				t.Fatalf("familiesFor(%v) = %v, want %v", tt.seeds, got, tt.want)
			}
		})
	}
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
	for _, seeds := range [][]string{{"127.0.0.1"}, {"127.77.3.4"}, {"203.0.113.9"}, {"198.51.100.7", "127.0.0.1"},
		{"::1"}, {"2001:db8::9"}, {"::1", "127.0.0.1"}} {
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

// TestFirstUsable: the fallback takes the families in the order given,
// prefers private addresses (IPv6: unique local) of up interfaces within
// a family, and is deterministic.
func TestFirstUsable(t *testing.T) {
	host := hostAddrs(t)
	for _, fams := range [][]family{{family4, family6}, {family6}, {family4}, {family6, family4}} {
		t.Run(familyNames(fams), func(t *testing.T) {
			usable := map[family]bool{}
			private := map[family]bool{}
			for ip, up := range host {
				if up && slices.Contains(fams, familyOf(ip)) && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
					usable[familyOf(ip)] = true
					private[familyOf(ip)] = private[familyOf(ip)] || ip.IsPrivate()
				}
			}
			got, err := firstUsable(fams)
			if len(usable) == 0 {
				if err == nil {
					t.Fatalf("no usable address, yet firstUsable = %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if up, ok := host[got]; !ok || !up || got.IsLoopback() || got.IsLinkLocalUnicast() {
				t.Fatalf("chose %v: want a non-loopback, non-link-local address of an up interface", got)
			}
			for _, f := range fams {
				if usable[f] {
					if familyOf(got) != f {
						t.Fatalf("chose %v (%s), want an %s address, the first family with one", got, familyOf(got), f)
					}
					break
				}
			}
			if private[familyOf(got)] && !got.IsPrivate() {
				t.Fatalf("chose public %v over a private address", got)
			}
			if again, err := firstUsable(fams); err != nil || again != got {
				t.Fatalf("second choice %v, %v differs from the first, %v", again, err, got)
			}
		})
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

// TestChooseUnderlayHostLacksSeedFamily (issue 34 item 5): on a host with
// IPv4 addresses only, a join to IPv6-only seeds fails closed with
// UnderlayFamily, unpinned; IPv4 seeds there are fine. Runs in a fresh
// network namespace (inNetns).
func TestChooseUnderlayHostLacksSeedFamily(t *testing.T) {
	if !inNetns(t) {
		return
	}
	if err := loopbackUp(); err != nil {
		t.Fatal(err)
	}
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v4only0"}, PeerName: "v4only1"} // this kernel has no dummy links
	if err := netlink.LinkAdd(link); err != nil {
		t.Fatal(err)
	}
	if peer, err := netlink.LinkByName("v4only1"); err != nil || netlink.LinkSetUp(peer) != nil {
		t.Fatalf("veth peer: %v", err)
	}
	addr, _ := netlink.ParseAddr("192.0.2.10/24")
	if err := netlink.AddrAdd(link, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	_, err := ChooseUnderlay(Pin{}, []netip.Addr{netip.MustParseAddr("fd99::1")})
	if codes.Of(err) != codes.UnderlayFamily {
		t.Fatalf("IPv6-only seeds on an IPv4-only host: %v (code %s), want %s", err, codes.Of(err), codes.UnderlayFamily)
	}
	u, err := ChooseUnderlay(Pin{}, []netip.Addr{netip.MustParseAddr("192.0.2.1")})
	if err != nil || u.Addr != netip.MustParseAddr("192.0.2.10") {
		t.Fatalf("IPv4 seeds: %+v, %v; want 192.0.2.10", u, err)
	}
}
