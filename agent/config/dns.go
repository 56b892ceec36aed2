package config

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshd/meshd/names"
)

// DNS is the cluster's names (issue 30, package names): every meshd
// answers NAME.CLUSTER.DOMAIN, from its own view of the cluster's
// records, on its overlay address and on a loopback address (port
// dns.port), never on the underlay. A change takes effect at the next
// start.
type DNS struct {
	// Enabled serves the names; default true.
	Enabled bool `yaml:"enabled"`
	// Domain is the names' domain: a node is NAME.CLUSTER.DOMAIN.
	// Default mesh; set the same on every node (each answers under its
	// own). Not local, localhost, arpa, invalid or onion, nor under one.
	Domain string `yaml:"domain"`
	// Loopback is the loopback address meshd answers on besides its
	// overlay address: what a host without systemd-resolved points its
	// resolver at. Default 127.0.77.53 (127.0.0.53, resolved's own stub,
	// is left alone).
	Loopback string `yaml:"loopback"`
	// Port is the DNS port on both addresses; default 53 (what resolvers
	// ask; the packaged unit grants CAP_NET_BIND_SERVICE).
	Port int `yaml:"port"`
	// Resolved: when systemd-resolved runs, meshd routes only
	// ~CLUSTER.DOMAIN to its overlay address on the overlay's link, over
	// D-Bus, and reverts that on leave and stop. Default true; kernel
	// overlay mode only. meshd never rewrites /etc/resolv.conf.
	Resolved bool `yaml:"resolved"`
}

// DefaultDNS is dns's defaults.
func DefaultDNS() DNS {
	return DNS{Enabled: true, Domain: names.DefaultDomain, Loopback: "127.0.77.53", Port: 53, Resolved: true}
}

// DNSLoopback is the loopback address and port the names are served on
// besides the overlay address (Validate checked it).
func (c File) DNSLoopback() netip.AddrPort {
	a, _ := netip.ParseAddr(c.DNS.Loopback)
	return netip.AddrPortFrom(a, uint16(c.DNS.Port))
}

// validDNS is Validate's check of dns (when enabled): bad reports each
// problem under its key.
func (c File) validDNS(bad func(field, value string, err error)) {
	if !c.DNS.Enabled {
		return
	}
	if err := names.ValidDomain(c.DNS.Domain); err != nil {
		bad("dns.domain", c.DNS.Domain, err)
	}
	if a, err := netip.ParseAddr(c.DNS.Loopback); err != nil || !a.Is4() || !a.IsLoopback() {
		bad("dns.loopback", c.DNS.Loopback, errors.New("must be an IPv4 loopback address (127.0.0.0/8), e.g. 127.0.77.53: the names are never served on the underlay"))
	} else if a == netip.MustParseAddr("127.0.0.53") || a == netip.MustParseAddr("127.0.0.54") {
		bad("dns.loopback", c.DNS.Loopback, errors.New("must not be systemd-resolved's own stub (127.0.0.53, 127.0.0.54)"))
	}
	if c.DNS.Port < 1 || c.DNS.Port > 65535 {
		bad("dns.port", fmt.Sprint(c.DNS.Port), errors.New("must be a port between 1 and 65535"))
	}
}
