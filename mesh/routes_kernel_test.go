package mesh

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestKernelUnsafeRoutes runs, in a fresh network namespace (root, see
// inNetns), a kernel-TUN node b between two userspace nodes: lighthouse lh
// and c, whose certificate carries 192.168.60.0/24. Reloads of b change
// its unsafe routes live, never with codes.RestartNeeded, and leave its
// tunnels up:
//
//   - Via moved from lh to c: a packet for the prefix makes b build a
//     tunnel to c, which it had none to;
//   - a route added with Install false gets no kernel route, one removed
//     loses its kernel route, and Verify reads the installed ones back;
//   - listen.so_mark reaches b's UDP socket;
//   - a new certificate carrying 192.168.50.0/24 makes b's firewall let
//     out packets from that LAN (here an address on lo) to c: Nebula
//     rebuilds its firewall only because the firewall section changed
//     with the certificate's routes (nebulaFirewall.Routable), and the
//     default firewall passes them only because it names local_cidr any.
func TestKernelUnsafeRoutes(t *testing.T) {
	if !inNetns(t) {
		return
	}
	if err := loopbackUp(); err != nil {
		t.Fatalf("bring lo up: %v", err)
	}
	ca := testCA(t)
	lhCert, lhKey := hostCert(t, ca, "lh", 1)
	lhIP, bIP, cIP := overlayIP(1).Addr(), overlayIP(2).Addr(), overlayIP(3).Addr()
	lan60, lan70, lan50 := pfx("192.168.60.0/24"), pfx("192.168.70.0/24"), pfx("192.168.50.0/24")

	lh, lhPort := startLighthouse(t, userspaceConfig(ca, lhCert, lhKey), testLogger("lh"))
	lighthouses := []Lighthouse{{OverlayIP: lhIP, Underlay: []netip.AddrPort{netip.AddrPortFrom(ip("127.0.0.1"), uint16(lhPort))}}}

	cCert, cKey := routeCerts(t, ca, "c", 3, []netip.Prefix{lan60, lan70})
	cCfg := userspaceConfig(ca, cCert[0], cKey)
	cCfg.Lighthouses = lighthouses
	c, err := Start(cCfg, testLogger("c"))
	if err != nil {
		t.Fatal(err)
	}

	bCert, bKey := routeCerts(t, ca, "b", 2, nil, []netip.Prefix{lan50})
	bCfg := DefaultConfig()
	bCfg.CACert, bCfg.Cert, bCfg.Key = ca.NebulaCertPEM(), bCert[0], bKey
	bCfg.ListenHost, bCfg.ListenPort, bCfg.Fast = "127.0.0.1", 0, true
	bCfg.LocalAllowList = []netip.Prefix{pfx("127.0.0.1/32")}
	bCfg.Lighthouses = lighthouses
	bCfg.UnsafeRoutes = []UnsafeRoute{{Route: lan60, Via: lhIP, Install: true}}
	b, err := Start(bCfg, testLogger("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if got := tunRoutes(t, bCfg.TunDev); !slices.Contains(got, lan60) {
		t.Fatalf("after Start: routes on %s %v, want %s", bCfg.TunDev, got, lan60)
	}
	l, err := net.Listen("tcp4", netip.AddrPortFrom(bIP, 7000).String()) // on b's TUN device
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	bEcho := netip.AddrPortFrom(bIP, 7000).String()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := echo(ctx, lh, bEcho); err != nil {
		t.Fatalf("lh -> b before any reload: %v", err)
	}

	// reload applies next to b and checks that it verifies, that the
	// tunnels b had are still up, and that the overlay carries traffic.
	reload := func(what string, next Config) {
		t.Helper()
		var up []netip.Addr
		for _, peer := range []netip.Addr{lhIP, cIP} {
			if _, ok := b.TunnelTo(peer); ok {
				up = append(up, peer)
			}
		}
		if err := b.Reload(next); err != nil {
			t.Fatalf("%s: reload = %v (code %s), want it applied live", what, err, codes.Of(err))
		}
		if err := b.Verify(next); err != nil {
			t.Fatalf("%s: verify after reload: %v", what, err)
		}
		bCfg = next
		for _, peer := range up {
			if _, ok := b.TunnelTo(peer); !ok {
				t.Errorf("%s: b lost its tunnel to %s", what, peer)
			}
		}
		if err := echo(ctx, lh, bEcho); err != nil {
			t.Errorf("%s: lh -> b across the overlay: %v", what, err)
		}
	}

	t.Run("via-moves-and-routes-change", func(t *testing.T) {
		// Nothing has made b and c talk yet: a tunnel between them can
		// only come from b routing a packet to c.
		if tn, ok := b.TunnelTo(cIP); ok {
			t.Fatalf("b has a tunnel to c before any packet was routed to it: %+v", tn)
		}
		next := bCfg
		next.UnsafeRoutes = []UnsafeRoute{{Route: lan60, Via: cIP, Install: true}, {Route: lan70, Via: cIP}}
		next.SoMark = 0x6d65
		reload("via lh -> c, 192.168.70.0/24 added without a kernel route", next)
		got := tunRoutes(t, bCfg.TunDev)
		if !slices.Contains(got, lan60) || slices.Contains(got, lan70) {
			t.Errorf("routes on %s %v, want %s and not %s (install false)", bCfg.TunDev, got, lan60, lan70)
		}
		if mark := socketMark(t, b.udpAddr()); mark != 0x6d65 {
			t.Errorf("so_mark of b's UDP socket = %#x, want 0x6d65", mark)
		}
		send := sender(t, netip.AddrPort{}, netip.MustParseAddrPort("192.168.60.5:9"))
		if !waitFor(ctx, func() bool { send(); _, ok := b.TunnelTo(cIP); return ok }) {
			t.Fatalf("b sent packets for 192.168.60.5 and built no tunnel to c: tunnels %+v", b.Tunnels())
		}
	})

	t.Run("route-removed", func(t *testing.T) {
		next := bCfg
		next.UnsafeRoutes = []UnsafeRoute{{Route: lan70, Via: cIP}}
		next.SoMark = 0
		reload("192.168.60.0/24 removed", next)
		if got := tunRoutes(t, bCfg.TunDev); slices.Contains(got, lan60) {
			t.Errorf("routes on %s %v: %s is still there", bCfg.TunDev, got, lan60)
		}
		if mark := socketMark(t, b.udpAddr()); mark != 0 {
			t.Errorf("so_mark of b's UDP socket = %#x, want 0 again", mark)
		}
	})

	t.Run("verify-reads-installed-routes", func(t *testing.T) {
		missing := bCfg
		missing.UnsafeRoutes = []UnsafeRoute{{Route: lan70, Via: cIP, Install: true}}
		if err := b.Verify(missing); codes.Of(err) != codes.OverlayApply {
			t.Errorf("Verify of a route b has not installed = %v, want %s", err, codes.OverlayApply)
		}
	})

	t.Run("a-connected-route-survives", func(t *testing.T) {
		// A LAN this host sits on (a standby router's own): an unsafe
		// route to the same prefix, added and removed, leaves the host's
		// connected route as it was. At metric 0 Nebula's RouteReplace
		// took it over and RouteDel then deleted it.
		la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan0"}, PeerName: "lan1"}
		if err := netlink.LinkAdd(la); err != nil {
			t.Fatal(err)
		}
		if err := netlink.AddrAdd(la, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(192, 168, 80, 1), Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(la); err != nil {
			t.Fatal(err)
		}
		peer, err := netlink.LinkByName("lan1")
		if err != nil || netlink.LinkSetUp(peer) != nil {
			t.Fatalf("lan1: %v", err)
		}
		lan80 := pfx("192.168.80.0/24")
		connected := func() bool {
			rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: la.Attrs().Index}, netlink.RT_FILTER_OIF)
			if err != nil {
				t.Fatal(err)
			}
			return slices.ContainsFunc(rs, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == lan80.String() })
		}
		if !waitFor(ctx, connected) {
			t.Fatal("no connected route for lan0")
		}
		next := bCfg
		next.UnsafeRoutes = append(slices.Clone(bCfg.UnsafeRoutes), UnsafeRoute{Route: lan80, Via: cIP, Install: true})
		reload("an unsafe route to a connected LAN", next)
		if !connected() {
			t.Fatal("the unsafe route replaced the host's connected route")
		}
		next = bCfg
		next.UnsafeRoutes = slices.DeleteFunc(slices.Clone(bCfg.UnsafeRoutes), func(r UnsafeRoute) bool { return r.Route == lan80 })
		reload("that route removed", next)
		if !connected() {
			t.Fatal("removing the unsafe route deleted the host's connected route")
		}
	})

	t.Run("certificate-routes-reach-the-firewall", func(t *testing.T) {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(192, 168, 50, 1), Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
		pc, err := c.ListenPacket("udp", ":7001")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()

		next := bCfg
		next.Cert = bCert[1] // carries 192.168.50.0/24
		reload("certificate with 192.168.50.0/24", next)
		send := sender(t, netip.MustParseAddrPort("192.168.50.1:0"), netip.AddrPortFrom(cIP, 7001))
		buf := make([]byte, 64)
		var last error
		if !waitFor(ctx, func() bool {
			send()
			_ = pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				last = err
				return false
			}
			if a := from.(*net.UDPAddr).AddrPort().Addr().Unmap(); a != ip("192.168.50.1") || string(buf[:n]) != "routed" {
				last = fmt.Errorf("read %q from %s", buf[:n], a)
				return false
			}
			return true
		}) {
			t.Fatalf("no datagram from 192.168.50.1 reached c through b: %v", last)
		}
	})

}

// routeCerts issues Nebula host certificates for 10.42.0.n, one per list
// of routes, all for the same key.
func routeCerts(t *testing.T, ca *pki.CA, name string, n byte, routes ...[]netip.Prefix) (certs [][]byte, keyPEM []byte) {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		c, err := ca.SignNebula(pki.NebulaRequest{
			PublicKey: keys.NebulaPublicPEM, Name: name, IP: overlayIP(n), Groups: []string{"worker"}, Routes: r,
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	return certs, keys.NebulaKeyPEM
}

// tunRoutes lists the main table's IPv4 routes on device dev.
func tunRoutes(t *testing.T, dev string) []netip.Prefix {
	t.Helper()
	link, err := netlink.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil {
			out = append(out, pfx("0.0.0.0/0"))
			continue
		}
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		out = append(out, netip.PrefixFrom(a.Unmap(), ones))
	}
	return out
}

// sender returns a function that sends one datagram from "from" (port 0:
// any; an invalid address: the kernel's choice) to "to" through the
// kernel, ignoring errors (a send may fail while a route has no tunnel).
func sender(t *testing.T, from, to netip.AddrPort) func() {
	t.Helper()
	var laddr *net.UDPAddr
	if from.Addr().IsValid() {
		laddr = net.UDPAddrFromAddrPort(from)
	}
	conn, err := net.ListenUDP("udp4", laddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return func() { _, _ = conn.WriteToUDPAddrPort([]byte("routed"), to) }
}

// socketMark is SO_MARK of this process's UDP socket bound to addr.
func socketMark(t *testing.T, addr netip.AddrPort) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_DGRAM {
			continue
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		var bound netip.AddrPort
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			bound = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
		case *unix.SockaddrInet6:
			bound = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
		default:
			continue
		}
		if bound != addr {
			continue
		}
		mark, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK)
		if err != nil {
			t.Fatal(err)
		}
		return mark
	}
	t.Fatalf("no UDP socket bound to %s", addr)
	return 0
}
