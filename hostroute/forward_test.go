package hostroute

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestForwardMasquerades builds a subnet router in namespaces: "client"
// (10.42.0.2, an overlay member, and 172.16.9.2, not one) reaches
// "router" over a veth named meshd0 standing in for Nebula's TUN device;
// "router" reaches "lan" (192.168.50.0/24) over lan0, and has a default
// route over wan0 (a veth whose peer, unaddressed, stays in "router"). It checks forwarding, the nftables rules and
// real UDP traffic through ApplyForward, a change of the routed prefixes,
// and RemoveForward.
func TestForwardMasquerades(t *testing.T) {
	needRoot(t)
	router, lan, client := newNS(t, "router"), newNS(t, "lan"), newNS(t, "client")
	for _, c := range [][]string{
		{"ip", "-n", router, "link", "add", "meshd0", "type", "veth", "peer", "name", "c0", "netns", client},
		{"ip", "-n", router, "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", lan},
		{"ip", "-n", router, "link", "add", "wan0", "type", "veth", "peer", "name", "wanpeer"},
		{"ip", "-n", router, "link", "set", "wanpeer", "up"},
		{"ip", "-n", router, "addr", "add", "10.42.0.1/16", "dev", "meshd0"},
		{"ip", "-n", router, "addr", "add", "172.16.9.1/24", "dev", "meshd0"},
		{"ip", "-n", router, "addr", "add", "192.168.50.1/24", "dev", "lan0"},
		{"ip", "-n", router, "addr", "add", "203.0.113.1/24", "dev", "wan0"},
		{"ip", "-n", router, "link", "set", "meshd0", "up"},
		{"ip", "-n", router, "link", "set", "lan0", "up"},
		{"ip", "-n", router, "link", "set", "wan0", "up"},
		{"ip", "-n", router, "route", "add", "default", "via", "203.0.113.254", "dev", "wan0"},
		{"ip", "-n", client, "addr", "add", "10.42.0.2/16", "dev", "c0"},
		{"ip", "-n", client, "addr", "add", "172.16.9.2/24", "dev", "c0"},
		{"ip", "-n", client, "link", "set", "c0", "up"},
		{"ip", "-n", client, "route", "add", "default", "via", "10.42.0.1"},
		{"ip", "-n", lan, "addr", "add", "192.168.50.2/24", "dev", "eth0"},
		{"ip", "-n", lan, "link", "set", "eth0", "up"},
		{"ip", "-n", lan, "route", "add", "default", "via", "192.168.50.1"},
	} {
		run(t, c...)
	}
	for _, ifc := range []string{"meshd0", "lan0", "wan0"} {
		if got := procForwarding(t, router, ifc); got != "0" {
			t.Fatalf("before: forwarding of %s is %s, want 0", ifc, got)
		}
	}

	var lanConn *net.UDPConn
	in(t, lan, func() {
		var err error
		lanConn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 168, 50, 2), Port: 9999})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { lanConn.Close() })

	overlay := netip.MustParsePrefix("10.42.0.0/16")
	h := New()
	f := Forward{TunDev: "meshd0", Overlay: overlay, Routed: []netip.Prefix{netip.MustParsePrefix("192.168.50.0/24")}}
	for range 2 { // the second is a no-op
		in(t, router, func() {
			if err := h.ApplyForward(f); err != nil {
				t.Fatalf("ApplyForward: %v", err)
			}
		})
	}
	wantForwarding(t, router, map[string]string{"meshd0": "1", "lan0": "1", "wan0": "0"})
	wantRules(t, router, []string{"ip saddr 10.42.0.0/16 ip daddr 192.168.50.0/24 oifname lan0 masquerade"})

	// The LAN host sees overlay members as the router, others as themselves,
	// and its answers come back.
	if got := sourceSeen(t, client, lanConn, "10.42.0.2", true); got != "192.168.50.1" {
		t.Errorf("from 10.42.0.2 the LAN host saw %s, want the router's 192.168.50.1 (masqueraded)", got)
	}
	if got := sourceSeen(t, client, lanConn, "172.16.9.2", true); got != "172.16.9.2" {
		t.Errorf("from 172.16.9.2, outside the overlay, the LAN host saw %s, want 172.16.9.2 (not masqueraded)", got)
	}

	// An exit node instead: lan0 is no longer an egress, so its forwarding
	// is put back and its rule goes; the default route's wan0 comes in.
	f.Routed = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	in(t, router, func() {
		if err := h.ApplyForward(f); err != nil {
			t.Fatalf("ApplyForward to 0.0.0.0/0: %v", err)
		}
	})
	wantForwarding(t, router, map[string]string{"meshd0": "1", "lan0": "0", "wan0": "1"})
	wantRules(t, router, []string{"ip saddr 10.42.0.0/16 oifname wan0 masquerade"})
	if got := sourceSeen(t, client, lanConn, "10.42.0.2", false); got != "10.42.0.2" {
		t.Errorf("after the change the LAN host saw %s, want 10.42.0.2: lan0's masquerade rule should be gone", got)
	}

	// Both, and the egress of each.
	f.Routed = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("192.168.50.0/24")}
	in(t, router, func() {
		if err := h.ApplyForward(f); err != nil {
			t.Fatalf("ApplyForward to both: %v", err)
		}
	})
	wantForwarding(t, router, map[string]string{"meshd0": "1", "lan0": "1", "wan0": "1"})
	wantRules(t, router, []string{
		"ip saddr 10.42.0.0/16 oifname wan0 masquerade",
		"ip saddr 10.42.0.0/16 ip daddr 192.168.50.0/24 oifname lan0 masquerade",
	})

	// Refusals change nothing.
	for name, c := range map[string]struct {
		f    Forward
		code codes.Code
	}{
		"fail/routed-into-tun": {Forward{TunDev: "meshd0", Overlay: overlay, Routed: []netip.Prefix{netip.MustParsePrefix("10.42.7.0/24")}}, codes.HostRouteInvalid},
		"fail/no-tun":          {Forward{TunDev: "nosuch0", Overlay: overlay, Routed: f.Routed}, codes.HostRouteApply},
	} {
		in(t, router, func() {
			if err := h.ApplyForward(c.f); codes.Of(err) != c.code {
				t.Errorf("%s: ApplyForward = %v (%q), want %s", name, err, codes.Of(err), c.code)
			} else {
				t.Logf("%s: %v", name, err)
			}
		})
	}
	wantRules(t, router, []string{
		"ip saddr 10.42.0.0/16 oifname wan0 masquerade",
		"ip saddr 10.42.0.0/16 ip daddr 192.168.50.0/24 oifname lan0 masquerade",
	})

	for range 2 { // the second has nothing to do
		in(t, router, func() {
			if err := h.RemoveForward(); err != nil {
				t.Fatalf("RemoveForward: %v", err)
			}
		})
	}
	if tables := run(t, "ip", "netns", "exec", router, "nft", "-j", "list", "tables"); strings.Contains(tables, `"name": "meshd"`) || strings.Contains(tables, `"name":"meshd"`) {
		t.Errorf("table ip meshd still there after RemoveForward: %s", tables)
	}
	wantForwarding(t, router, map[string]string{"meshd0": "0", "lan0": "0", "wan0": "0"})

	// A Host that applied nothing removes what an earlier process left.
	in(t, router, func() {
		if err := h.ApplyForward(f); err != nil {
			t.Fatalf("ApplyForward: %v", err)
		}
		if err := New().RemoveForward(); err != nil {
			t.Fatalf("RemoveForward of a new Host: %v", err)
		}
		if err := h.ApplyForward(Forward{}); err != nil { // no Routed: RemoveForward
			t.Fatalf("ApplyForward with no prefixes: %v", err)
		}
	})
	wantForwarding(t, router, map[string]string{"meshd0": "0", "lan0": "0", "wan0": "0"})
	if out, err := exec.Command("ip", "netns", "exec", router, "nft", "list", "table", "ip", "meshd").CombinedOutput(); err == nil {
		t.Errorf("table ip meshd still there:\n%s", out)
	}
}

// wantForwarding checks /proc's forwarding value of each interface of ns.
func wantForwarding(t *testing.T, ns string, want map[string]string) {
	t.Helper()
	for ifc, w := range want {
		if got := procForwarding(t, ns, ifc); got != w {
			t.Errorf("forwarding of %s is %s, want %s", ifc, got, w)
		}
	}
}

// sourceSeen sends a UDP datagram from address src of namespace client to
// the LAN host's listener and returns the source address the listener saw.
// With reply, the listener answers and the client must get the answer: the
// way back is forwarded (and un-masqueraded) too.
func sourceSeen(t *testing.T, client string, lanConn *net.UDPConn, src string, reply bool) string {
	t.Helper()
	label := fmt.Sprintf("from %s at %d", src, time.Now().UnixNano())
	var c *net.UDPConn
	in(t, client, func() {
		var err error
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: net.IPv4(192, 168, 50, 2), Port: 9999})
		if err != nil {
			t.Fatal(err)
		}
	})
	defer c.Close()
	if _, err := c.Write([]byte(label)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	var from *net.UDPAddr
	for {
		if err := lanConn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, addr, err := lanConn.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("the LAN host got nothing %s: %v", label, err)
		}
		if string(buf[:n]) == label {
			from = addr
			break
		}
	}
	if !reply {
		return from.IP.String()
	}
	if _, err := lanConn.WriteToUDP([]byte("re "+label), from); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "re "+label {
		t.Errorf("the client at %s got no answer from the LAN host (%q, %v)", src, buf[:n], err)
	}
	return from.IP.String()
}

// wantRules checks, with nft itself, that table ip meshd has exactly the
// chain postrouting (nat, hook postrouting, priority srcnat) holding
// exactly the rules want, in order, as nft writes them (without quotes).
func wantRules(t *testing.T, ns string, want []string) {
	t.Helper()
	out := run(t, "ip", "netns", "exec", ns, "nft", "-j", "list", "table", "ip", "meshd")
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft -j: %v\n%s", err, out)
	}
	var chains, rules []string
	for _, o := range doc.Nftables {
		if raw, ok := o["chain"]; ok {
			var c struct {
				Table, Name, Type, Hook, Policy string
				Prio                            int
			}
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			chains = append(chains, fmt.Sprintf("%s %s type %s hook %s priority %d policy %s", c.Table, c.Name, c.Type, c.Hook, c.Prio, c.Policy))
		}
		if raw, ok := o["rule"]; ok {
			var r struct {
				Chain string
				Expr  []map[string]json.RawMessage
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			if r.Chain != "postrouting" {
				t.Errorf("a rule in chain %s", r.Chain)
			}
			rules = append(rules, renderRule(r.Expr))
		}
	}
	if want := []string{"meshd postrouting type nat hook postrouting priority 100 policy accept"}; !slices.Equal(chains, want) {
		t.Errorf("chains %q, want %q", chains, want)
	}
	if !slices.Equal(rules, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(rules, "\n"), strings.Join(want, "\n"))
	}
}

// renderRule writes a rule of nft's JSON the way nft writes it as text,
// without quotes; what it does not know stays JSON, so it shows.
func renderRule(exprs []map[string]json.RawMessage) string {
	var parts []string
	for _, e := range exprs {
		if raw, ok := e["match"]; ok {
			var m struct {
				Op          string
				Left, Right json.RawMessage
			}
			if err := json.Unmarshal(raw, &m); err == nil && m.Op == "==" {
				parts = append(parts, operand(m.Left)+" "+operand(m.Right))
				continue
			}
		}
		if _, ok := e["masquerade"]; ok && len(e) == 1 {
			parts = append(parts, "masquerade")
			continue
		}
		b, _ := json.Marshal(e)
		parts = append(parts, string(b))
	}
	return strings.Join(parts, " ")
}

// operand writes one side of an nft JSON match.
func operand(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Payload *struct{ Protocol, Field string }
		Meta    *struct{ Key string }
		Prefix  *struct {
			Addr string
			Len  int
		}
	}
	if json.Unmarshal(raw, &o) == nil {
		switch {
		case o.Payload != nil:
			return o.Payload.Protocol + " " + o.Payload.Field
		case o.Meta != nil:
			return o.Meta.Key
		case o.Prefix != nil:
			return fmt.Sprintf("%s/%d", o.Prefix.Addr, o.Prefix.Len)
		}
	}
	return string(raw)
}
