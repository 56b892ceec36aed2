//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"strings"
)

// The NAT lab (docs/architecture.md, "The NAT lab"): the Net's hub bridge
// is the internet, its hosts have public addresses (10.99.0.x); a Site is
// a home or office network behind a router namespace that has one leg on
// the internet and a LAN bridge of its own, and rewrites what leaves it
// with nftables. Nothing on the internet can reach a site's private
// addresses (172.16.<site>.x): there is no route to them, as on the real
// internet. Every NAT test uses these helpers and nothing else.

// NATMode is what a site's router does to traffic leaving for the internet.
type NATMode int

const (
	// NATPortPreserving is nftables `masquerade`: the router's public
	// address, the source port kept when it is free (the commonest home
	// router; endpoint-independent in practice, so holes can be punched).
	NATPortPreserving NATMode = iota
	// NATSymmetric is `masquerade random,fully-random`: a new public port
	// for every destination, so a port learned from one peer is useless to
	// another (carrier-grade and many corporate NATs). Only a relay helps.
	NATSymmetric
	// NATUDPBlocked masquerades like NATPortPreserving but drops every UDP
	// packet a site host sends to the internet (networks that allow only
	// web traffic out).
	NATUDPBlocked
)

func (m NATMode) String() string {
	switch m {
	case NATPortPreserving:
		return "port-preserving"
	case NATSymmetric:
		return "symmetric"
	case NATUDPBlocked:
		return "udp-blocked"
	}
	return fmt.Sprintf("NATMode(%d)", int(m))
}

// Site is a private network behind a NAT router.
type Site struct {
	Net    *Net
	Name   string
	Mode   NATMode
	Router *Host // the router's namespace; Router.IP is the site's public address
	index  int   // 172.16.<index>.0/24
	hosts  []*Host
}

var siteSeq int

// AddSite adds a router on the internet with a private LAN behind it that
// NATs as mode says.
func (n *Net) AddSite(name string, mode NATMode) *Site {
	n.t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		n.t.Fatalf("nft not found (%v); run scripts/install-deps.sh", err)
	}
	siteSeq++
	s := &Site{Net: n, Name: name, Mode: mode, index: siteSeq%250 + 1}
	s.Router = n.AddHost("r" + name)
	r := s.Router.Name
	n.in(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	n.in(r, "ip", "link", "add", "lan", "type", "bridge")
	n.in(r, "ip", "addr", "add", s.gateway()+"/24", "dev", "lan")
	n.in(r, "ip", "link", "set", "lan", "up")
	masq := "masquerade"
	if mode == NATSymmetric {
		masq = "masquerade random,fully-random"
	}
	// The router's own firewall drops what nobody asked for, as a home
	// router's does. It matters: a packet the kernel delivers locally
	// leaves a conntrack entry behind even when no socket takes it, and a
	// site host's next packet to that sender would then clash with it and
	// leave with a random port instead of its own (a port-preserving NAT
	// turned symmetric by one early packet). Dropped in the input hook, the
	// packet's entry is never confirmed.
	rules := fmt.Sprintf(`table ip lab_nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "eth0" ip saddr %s %s
	}
	chain input {
		type filter hook input priority filter; policy accept;
		iifname "eth0" ct state new drop
	}
}
`, s.prefix(), masq)
	if mode == NATUDPBlocked {
		rules += `table inet lab_filter {
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname "lan" oifname "eth0" meta l4proto udp drop
	}
}
`
	}
	n.nft(r, rules)
	return s
}

// gateway is the router's LAN address; prefix the site's network.
func (s *Site) gateway() string { return fmt.Sprintf("172.16.%d.1", s.index) }
func (s *Site) prefix() string  { return fmt.Sprintf("172.16.%d.0/24", s.index) }

// AddHost adds a namespace on the site's LAN (172.16.<site>.<i+1>), its
// default route through the router.
func (s *Site) AddHost(name string) *Host {
	n := s.Net
	n.t.Helper()
	i := len(s.hosts) + 2
	h := &Host{Net: n, Name: fmt.Sprintf("%s-%s", n.prefix, name), Link: fmt.Sprintf("%ss%dh%d", n.prefix, s.index, i),
		IP: fmt.Sprintf("172.16.%d.%d", s.index, i), linkNS: s.Router.Name}
	run(n.t, "ip", "netns", "add", h.Name)
	n.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.Name).Run() })
	run(n.t, "ip", "link", "add", h.Link, "type", "veth", "peer", "name", "eth0", "netns", h.Name)
	run(n.t, "ip", "link", "set", h.Link, "netns", s.Router.Name)
	n.in(s.Router.Name, "ip", "link", "set", h.Link, "master", "lan")
	n.in(s.Router.Name, "ip", "link", "set", h.Link, "up")
	n.in(h.Name, "ip", "link", "set", "lo", "up")
	n.in(h.Name, "ip", "addr", "add", h.IP+"/24", "dev", "eth0")
	n.in(h.Name, "ip", "link", "set", "eth0", "up")
	n.in(h.Name, "ip", "route", "add", "default", "via", s.gateway())
	s.hosts = append(s.hosts, h)
	return h
}

// NewNode adds a host to the site and writes a meshd config for a node
// named name on it: bound to and advertising its private address, as a
// machine behind a home router does.
func (s *Site) NewNode(name string) *Node {
	s.Net.t.Helper()
	return s.Net.NewNodeOn(s.AddHost(name), name)
}

// nft loads an nftables ruleset into namespace ns.
func (n *Net) nft(ns, rules string) {
	n.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("nft in %s: %v: %s\n%s", ns, err, out, rules)
	}
}

// RefuseRelaying makes h's Nebula relay for nobody while it stays a
// lighthouse and a peer: nftables in h's namespace drops every Nebula
// control packet to or from UDP 4242. Nebula's header is sent in clear,
// and type 6 (control; byte 0 is 0x16 in header version 1) carries only a
// relay's set-up (CreateRelayRequest and CreateRelayResponse), so
// handshakes, lighthouse queries and tunnel data pass. Every control node
// offers to relay (desired.Compute), so this is how a test leaves a
// volunteer the only relay that works: a control node that cannot relay
// in practice, as one whose uplink drops what it is asked to forward.
func (n *Net) RefuseRelaying(h *Host) {
	n.t.Helper()
	n.nft(h.Name, `table inet lab_norelay {
	chain in {
		type filter hook input priority filter; policy accept;
		udp dport 4242 @th,64,8 0x16 counter drop
	}
	chain out {
		type filter hook output priority filter; policy accept;
		udp sport 4242 @th,64,8 0x16 counter drop
	}
}
`)
}
