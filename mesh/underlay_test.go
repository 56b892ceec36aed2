package mesh

import (
	"net"
	"net/netip"
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
		pin      string
		want     netip.Addr // checked when wantCode is ""
		wantCode codes.Code
	}{
		{"ok/loopback", "127.0.0.1", netip.MustParseAddr("127.0.0.1"), ""},
		{"ok/any-127-8", "127.77.3.4", netip.MustParseAddr("127.77.3.4"), ""},
		{"ok/ipv6-loopback", "::1", netip.MustParseAddr("::1"), ""},
		{"ok/4in6-loopback-unmapped", "::ffff:127.0.0.5", netip.MustParseAddr("127.0.0.5"), ""},
		{"fail/not-on-this-machine", "203.0.113.9", netip.Addr{}, codes.AdvertiseAddr},
		{"fail/not-an-ip", "not-an-ip", netip.Addr{}, codes.AdvertiseAddr},
		{"fail/hostname", "localhost", netip.Addr{}, codes.AdvertiseAddr},
		{"fail/with-port", "127.0.0.1:7946", netip.Addr{}, codes.AdvertiseAddr},
		{"fail/unspecified-v4", "0.0.0.0", netip.Addr{}, codes.AdvertiseAddr},
		{"fail/unspecified-v6", "::", netip.Addr{}, codes.AdvertiseAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChooseUnderlay(tt.pin)
			if c := codes.Of(err); c != tt.wantCode {
				t.Fatalf("ChooseUnderlay(%q) = %v, %v (code %q), want code %q", tt.pin, got, err, c, tt.wantCode)
			}
			if tt.wantCode == "" && got != tt.want {
				t.Fatalf("ChooseUnderlay(%q) = %v, want %v", tt.pin, got, tt.want)
			}
			if tt.wantCode != "" && got.IsValid() {
				t.Fatalf("ChooseUnderlay(%q) returned %v with its error", tt.pin, got)
			}
		})
	}
	t.Run("ok/assigned-address", func(t *testing.T) {
		ip, ok := anAssignedIPv4(t)
		if !ok {
			t.Skip("no non-loopback IPv4 address on this machine")
		}
		got, err := ChooseUnderlay(ip.String())
		if err != nil || got != ip {
			t.Fatalf("ChooseUnderlay(%q) = %v, %v (code %q)", ip, got, err, codes.Of(err))
		}
	})
}

func TestChooseUnderlayAuto(t *testing.T) {
	host := hostAddrs(t)
	var usable, private bool
	for ip, up := range host {
		if up && ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			usable = true
			private = private || ip.IsPrivate()
		}
	}
	got, err := ChooseUnderlay("")
	if !usable {
		if c := codes.Of(err); c != codes.AdvertiseAddr {
			t.Fatalf("no usable address, yet ChooseUnderlay(\"\") = %v, %v (code %q), want code %q", got, err, c, codes.AdvertiseAddr)
		}
		return
	}
	if err != nil {
		t.Fatalf("ChooseUnderlay(\"\") = %v (code %q)", err, codes.Of(err))
	}
	if up, ok := host[got]; !ok || !up {
		t.Fatalf("chose %v, which is not on an up interface of this machine", got)
	}
	if !got.Is4() || got.IsLoopback() || got.IsLinkLocalUnicast() {
		t.Fatalf("chose %v: want a non-loopback, non-link-local IPv4 address", got)
	}
	if private && !got.IsPrivate() {
		t.Fatalf("chose public %v over a private address", got)
	}
	again, err := ChooseUnderlay("")
	if err != nil || again != got {
		t.Fatalf("second choice %v, %v differs from the first, %v", again, err, got)
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
