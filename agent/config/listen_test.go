package config

import (
	"net/netip"
	"testing"

	"github.com/meshd/meshd/pki"
)

// TestNebulaListenHost: Nebula binds "::" (dual-stack) when bind_addr is
// unspecified and the underlay is IPv6 (issue 34: an IPv6-only host), and
// bind_addr as given otherwise: 0.0.0.0 stays for an IPv4 underlay, a
// specific address is never changed.
func TestNebulaListenHost(t *testing.T) {
	tests := []struct {
		name, bind, underlay, want string
	}{
		{"ipv4-underlay/default-bind", "0.0.0.0", "192.0.2.10", "0.0.0.0"},
		{"ipv4-underlay/bind-v6-any", "::", "192.0.2.10", "::"},
		{"ipv4-mapped-underlay-is-ipv4", "0.0.0.0", "::ffff:192.0.2.10", "0.0.0.0"},
		{"ipv6-underlay/default-bind", "0.0.0.0", "fd99::1", "::"},
		{"ipv6-underlay/bind-v6-any", "::", "fd99::1", "::"},
		{"ipv6-underlay/specific-bind-kept", "fd99::1", "fd99::1", "fd99::1"},
		{"ipv6-underlay/specific-ipv4-bind-kept", "10.0.0.1", "fd99::1", "10.0.0.1"},
		{"no-underlay-yet", "0.0.0.0", "", "0.0.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u netip.Addr
			if tt.underlay != "" {
				u = netip.MustParseAddr(tt.underlay)
			}
			if got := NebulaListenHost(tt.bind, u); got != tt.want {
				t.Fatalf("NebulaListenHost(%q, %v) = %q, want %q", tt.bind, u, got, tt.want)
			}
			c := Default()
			c.BindAddr = tt.bind
			if got := c.MeshBase(pki.RoleWorker, u).ListenHost; got != tt.want {
				t.Fatalf("MeshBase with bind_addr %q, underlay %v: listen host %q, want %q", tt.bind, u, got, tt.want)
			}
		})
	}
}
