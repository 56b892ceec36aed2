package mesh

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/slackhq/nebula"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestCheckFirewall: each kind of bad rule is refused with
// codes.FirewallRule naming the rule and key; good rules pass.
func TestCheckFirewall(t *testing.T) {
	good := [][]FirewallRule{
		nil, {},
		AnyAny(),
		{{Port: "7000", Proto: "tcp", Group: "control"}},
		{{Port: "8000-8100", Proto: "udp", Groups: []string{"worker", "db"}}},
		{{Port: "any", Proto: "icmp", Host: "node-1"}},
		{{Port: "443", Proto: "tcp", CIDR: "10.42.0.0/24"}, {Port: "any", Proto: "any", Groups: []string{"any"}}},
	}
	for i, rules := range good {
		if err := CheckFirewall("inbound", rules); err != nil {
			t.Errorf("good %d: %v", i, err)
		}
	}
	bad := []struct {
		rule  FirewallRule
		field string
	}{
		{FirewallRule{Port: "any", Proto: "sctp", Host: "any"}, "inbound[1].proto"},
		{FirewallRule{Port: "", Proto: "tcp", Host: "any"}, "inbound[1].port"},
		{FirewallRule{Port: "0", Proto: "tcp", Host: "any"}, "inbound[1].port"},
		{FirewallRule{Port: "70000", Proto: "tcp", Host: "any"}, "inbound[1].port"},
		{FirewallRule{Port: "90-80", Proto: "tcp", Host: "any"}, "inbound[1].port"},
		{FirewallRule{Port: "http", Proto: "tcp", Host: "any"}, "inbound[1].port"},
		{FirewallRule{Port: "80", Proto: "icmp", Host: "any"}, "inbound[1].port"},
		{FirewallRule{Port: "80", Proto: "tcp"}, "inbound[1].host"},
		{FirewallRule{Port: "80", Proto: "tcp", Host: "Bad_Name"}, "inbound[1].host"},
		{FirewallRule{Port: "80", Proto: "tcp", Group: "Ops"}, "inbound[1].group"},
		{FirewallRule{Port: "80", Proto: "tcp", Group: "ops", Groups: []string{"db"}}, "inbound[1].group"},
		{FirewallRule{Port: "80", Proto: "tcp", Groups: []string{"db", "1x"}}, "inbound[1].groups[1]"},
		{FirewallRule{Port: "80", Proto: "tcp", Groups: []string{"any", "db"}}, "inbound[1].groups"},
		{FirewallRule{Port: "80", Proto: "tcp", CIDR: "10.42.0.0"}, "inbound[1].cidr"},
		{FirewallRule{Port: "80", Proto: "tcp", CIDR: "fd00::/8"}, "inbound[1].cidr"},
	}
	for _, tc := range bad {
		err := CheckFirewall("inbound", []FirewallRule{AnyAny()[0], tc.rule})
		var fe *FirewallError
		if codes.Of(err) != codes.FirewallRule || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want %s naming %s", tc.rule, err, codes.FirewallRule, tc.field)
		}
	}
	// Config.Validate carries the rule's code, not ConfigInvalid.
	c := goldenWorker(t)
	c.Outbound = []FirewallRule{{Port: "any", Proto: "gre", Host: "any"}}
	if err := c.Validate(); codes.Of(err) != codes.FirewallRule {
		t.Errorf("Validate with a bad outbound rule = %v, want %s", err, codes.FirewallRule)
	}
}

// goldenFirewall is a worker whose inbound firewall lets control nodes
// reach one TCP port, the group db a port range, and everyone ICMP, with
// MTU 1400.
func goldenFirewall(t testing.TB) Config {
	c := goldenWorker(t)
	c.MTU = 1400
	c.Inbound = []FirewallRule{
		{Port: "7000", Proto: "tcp", Group: "control"},
		{Port: "5432-5433", Proto: "tcp", Groups: []string{"worker", "db"}},
		{Port: "any", Proto: "icmp", Host: "any"},
		{Port: "53", Proto: "udp", CIDR: "10.42.0.0/24"},
	}
	return c
}

// recordedRule is one rule as Nebula's parser hands it to the firewall.
type recordedRule struct {
	inbound    bool
	proto      uint8
	start, end int32
	groups     []string
	host, cidr string
	localCIDR  string
}

type recordingFirewall struct{ rules []recordedRule }

func (f *recordingFirewall) AddRule(incoming bool, proto uint8, start, end int32, groups []string, host, cidr, localCIDR, _, _ string) error {
	f.rules = append(f.rules, recordedRule{incoming, proto, start, end, slices.Clone(groups), host, cidr, localCIDR})
	return nil
}

// TestFirewallReadByNebula runs the rendered firewall through Nebula's
// own rule parser (the one reload uses) and checks what it adds.
func TestFirewallReadByNebula(t *testing.T) {
	nc := readByNebula(t, goldenFirewall(t))
	var in, out recordingFirewall
	if err := nebula.AddFirewallRulesFromConfig(slog.New(slog.DiscardHandler), true, nc, &in); err != nil {
		t.Fatalf("Nebula refuses the inbound rules: %v", err)
	}
	if err := nebula.AddFirewallRulesFromConfig(slog.New(slog.DiscardHandler), false, nc, &out); err != nil {
		t.Fatalf("Nebula refuses the outbound rules: %v", err)
	}
	const tcp, udp, icmp, anyProto = 6, 17, 1, 0
	want := []recordedRule{
		{true, tcp, 7000, 7000, []string{"control"}, "", "", ""},
		{true, tcp, 5432, 5433, []string{"worker", "db"}, "", "", ""},
		{true, icmp, 0, 0, nil, "any", "", ""},
		{true, udp, 53, 53, nil, "", "10.42.0.0/24", ""},
	}
	if len(in.rules) != len(want) {
		t.Fatalf("Nebula read %d inbound rules, want %d: %+v", len(in.rules), len(want), in.rules)
	}
	for i, w := range want {
		g := in.rules[i]
		if g.inbound != w.inbound || g.proto != w.proto || g.start != w.start || g.end != w.end ||
			!slices.Equal(g.groups, w.groups) || g.host != w.host || g.cidr != w.cidr || g.localCIDR != w.localCIDR {
			t.Errorf("inbound rule %d: Nebula read %+v, want %+v", i, g, w)
		}
	}
	if len(out.rules) != 1 || out.rules[0].host != "any" || out.rules[0].proto != anyProto || out.rules[0].localCIDR != "any" {
		t.Errorf("outbound: Nebula read %+v, want the default any/any with local_cidr any", out.rules)
	}
	if got := nc.GetInt("tun.mtu", 0); got != 1400 {
		t.Errorf("tun.mtu = %d, want 1400", got)
	}

	var routed recordingFirewall
	if err := nebula.AddFirewallRulesFromConfig(slog.New(slog.DiscardHandler), true, readByNebula(t, goldenRoutes(t)), &routed); err != nil {
		t.Fatalf("Nebula refuses the inbound rules with local_cidr: %v", err)
	}
	if len(routed.rules) != 2 || routed.rules[0].localCIDR != "" || routed.rules[1].localCIDR != "192.168.50.0/24" {
		t.Errorf("Nebula read %+v, want local_cidr unset, then 192.168.50.0/24", routed.rules)
	}
}

// TestUserspaceFirewall: on a real (userspace) overlay, b's inbound rule
// lets only the group control reach its port 7000: the lighthouse (role
// control) gets through, worker a does not. A Reload of b that allows the
// node group ops, which a's certificate carries, lets a in without
// restarting b, and now shuts the lighthouse out.
func TestUserspaceFirewall(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	lhCert, lhKey := groupCert(t, ca, "lh", 1, "control")
	aCert, aKey := groupCert(t, ca, "a", 2, "worker", "ops")
	bCert, bKey := groupCert(t, ca, "b", 3, "worker")
	lhIP := overlayIP(1).Addr()
	bEcho := netip.AddrPortFrom(overlayIP(3).Addr(), 7000).String()

	lh, lhPort := startLighthouse(t, userspaceConfig(ca, lhCert, lhKey), testLogger("lh"))
	lighthouses := []Lighthouse{{OverlayIP: lhIP, Underlay: []netip.AddrPort{netip.AddrPortFrom(ip("127.0.0.1"), uint16(lhPort))}}}

	bCfg := userspaceConfig(ca, bCert, bKey)
	bCfg.Lighthouses = lighthouses
	bCfg.Inbound = []FirewallRule{{Port: "7000", Proto: "tcp", Group: "control"}}
	b, err := Start(bCfg, testLogger("b"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen("tcp", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	aCfg := userspaceConfig(ca, aCert, aKey)
	aCfg.Lighthouses = lighthouses
	a, err := Start(aCfg, testLogger("a"))
	if err != nil {
		t.Fatal(err)
	}

	allowed := func(m *Mesh, who string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		if err := echo(ctx, m, bEcho); err != nil {
			t.Fatalf("%s -> b:7000 should pass the firewall: %v", who, err)
		}
	}
	blocked := func(m *Mesh, who string) {
		t.Helper()
		// The tunnel exists (the allowed echo built it, or WaitTunnel),
		// so a drop is the firewall's, not a missing path.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if err := echo(ctx, m, bEcho); err == nil {
			t.Fatalf("%s -> b:7000 passed; the firewall should drop it", who)
		}
	}

	allowed(lh, "lighthouse (control)")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.WaitTunnel(ctx, lhIP); err != nil {
		t.Fatal(err)
	}
	blocked(a, "a (worker, ops)")

	next := bCfg
	next.Inbound = []FirewallRule{{Port: "7000", Proto: "tcp", Group: "ops"}}
	if err := b.Reload(next); err != nil {
		t.Fatalf("reload with a new firewall: %v", err)
	}
	allowed(a, "a (ops) after reload")
	blocked(lh, "lighthouse (control) after reload")

	bad := next
	bad.Inbound = []FirewallRule{{Port: "7000", Proto: "tcp", Group: "Not_A_Group"}}
	if err := b.Reload(bad); codes.Of(err) != codes.FirewallRule {
		t.Fatalf("reload with a bad rule = %v, want %s", err, codes.FirewallRule)
	}
	allowed(a, "a (ops) after a refused reload")
}

// groupCert issues a Nebula host certificate for 10.42.0.n carrying the
// given groups.
func groupCert(t *testing.T, ca *pki.CA, name string, n byte, groups ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err = ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: name, IP: overlayIP(n), Groups: groups}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keys.NebulaKeyPEM
}
