package preflight

import (
	"net/netip"
	"slices"
	"testing"
)

// TestSeedAddrs: the addresses ChooseUnderlay routes to are read from the
// token's "host:port" seeds, IPv4 and bracketed IPv6 alike (issue 34), an
// IPv4-mapped IPv6 address as IPv4; a seed that is not host:port is left
// out, and the order is kept.
func TestSeedAddrs(t *testing.T) {
	tests := []struct {
		name  string
		seeds []string
		want  []string
	}{
		{"ipv4", []string{"192.0.2.1:7300"}, []string{"192.0.2.1"}},
		{"ipv6", []string{"[fd99::1]:7300"}, []string{"fd99::1"}},
		{"ipv6-mapped-ipv4", []string{"[::ffff:192.0.2.1]:7300"}, []string{"192.0.2.1"}},
		{"mixed/order-kept", []string{"[2001:db8::2]:7300", "192.0.2.1:7300", "[fd99::3]:7300"},
			[]string{"2001:db8::2", "192.0.2.1", "fd99::3"}},
		{"skip/unbracketed-ipv6", []string{"fd99::1:7300", "[fd99::2]:7300"}, []string{"fd99::2"}},
		{"skip/no-port", []string{"[fd99::1]", "192.0.2.1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []netip.Addr
			for _, w := range tt.want {
				want = append(want, netip.MustParseAddr(w))
			}
			if got := seedAddrs(t.Context(), tt.seeds); !slices.Equal(got, want) {
				t.Fatalf("seedAddrs(%q) = %v, want %v", tt.seeds, got, want)
			}
		})
	}
}
