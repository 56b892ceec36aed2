package agenttest_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// ask sends one query to addr over UDP and returns the answer.
func ask(addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	r, _, err := c.Exchange(m, addr)
	return r, err
}

// aOf is the address name resolves to at addr, or the rcode's name.
func aOf(addr, name string) string {
	r, err := ask(addr, name, dns.TypeA)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case r.Rcode != dns.RcodeSuccess:
		return dns.RcodeToString[r.Rcode]
	case len(r.Answer) != 1:
		return fmt.Sprintf("%d answers", len(r.Answer))
	}
	return r.Answer[0].(*dns.A).A.String()
}

// TestNames: every member answers every active member's name with its
// overlay IP (and the PTR back) on its loopback DNS address, and refuses
// names outside the cluster's zone; `status` shows the DNS state and
// `nodes` each name; a removed node is NXDOMAIN on every member within
// 2 s of the removal returning; a worker still answers with every
// control node down (its own copy of the records).
func TestNames(t *testing.T) {
	clock := &agenttest.Clock{}
	c1 := agenttest.NewNode(t, "c1", clock)
	c1.Init(t, "alpha")
	w1 := agenttest.NewNode(t, "w1", clock)
	if _, err := w1.Join(t, c1.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatalf("join w1: %v", err)
	}
	w2 := agenttest.NewNode(t, "w2", clock)
	if _, err := w2.Join(t, c1.Admit(t, apitype.AdmitRequest{Name: "w2"})); err != nil {
		t.Fatalf("join w2: %v", err)
	}
	overlay := map[string]string{}
	for _, r := range c1.Nodes(t) {
		overlay[r.Name] = r.OverlayIP
		if want := r.Name + ".alpha.mesh"; r.DNSName != want {
			t.Errorf("nodes: %s's dns name %q, want %q", r.Name, r.DNSName, want)
		}
	}
	nodes := []*agenttest.Node{c1, w1, w2}
	dnsAddr := func(n *agenttest.Node) string { return net.JoinHostPort(n.IP, strconv.Itoa(agenttest.DNSPort)) }

	// Every member answers every name within a second of the joins.
	for _, n := range nodes {
		agenttest.WaitFor(t, t.Context(), time.Second, func() error {
			for name, ip := range overlay {
				if got := aOf(dnsAddr(n), name+".alpha.mesh"); got != ip {
					return fmt.Errorf("%s answers %s.alpha.mesh with %s, want %s", n.Name, name, got, ip)
				}
			}
			return nil
		})
	}
	rev, _ := dns.ReverseAddr(overlay["w2"])
	if r, err := ask(dnsAddr(w1), rev, dns.TypePTR); err != nil || len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "w2.alpha.mesh." {
		t.Errorf("w1's PTR for w2's address: %v %v", r, err)
	}
	if got := aOf(dnsAddr(w1), "example.com"); got != "REFUSED" {
		t.Errorf("w1 answers example.com with %s, want REFUSED (never forwarded)", got)
	}
	st, err := w1.Client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.DNS == nil || st.DNS.Domain != "alpha.mesh" || st.DNS.Names != 3 || len(st.DNS.Listening) != 2 ||
		st.DNS.Loopback != dnsAddr(w1) || st.DNS.Resolved != "off" || st.DNS.Hint == "" {
		t.Errorf("w1's status DNS: %+v", st.DNS)
	}

	// Commands take a node's DNS name where they take its name.
	if rep, err := w1.Client.Ping(t.Context(), apitype.PingRequest{Name: "c1.alpha.mesh."}); err != nil || rep.Name != "c1" {
		t.Errorf("ping c1.alpha.mesh.: %+v %v", rep, err)
	}

	// The removal: NXDOMAIN everywhere within 2 s of remove returning.
	if err := c1.Client.Remove(t.Context(), "W2.alpha.mesh"); err != nil {
		t.Fatalf("remove w2: %v", err)
	}
	removed := time.Now()
	for _, n := range []*agenttest.Node{c1, w1} {
		agenttest.WaitFor(t, context.Background(), time.Until(removed.Add(2*time.Second)), func() error {
			if got := aOf(dnsAddr(n), "w2.alpha.mesh"); got != "NXDOMAIN" {
				return fmt.Errorf("%s answers removed w2 with %s", n.Name, got)
			}
			return nil
		})
	}
	t.Logf("w2 NXDOMAIN on c1 and w1 %s after remove returned", time.Since(removed).Round(time.Millisecond))

	// Every control node down: w1 answers from its own copy.
	c1.Stop(t)
	if got := aOf(dnsAddr(w1), "c1.alpha.mesh"); got != overlay["c1"] {
		t.Errorf("w1 with c1 down answers c1.alpha.mesh with %s, want %s", got, overlay["c1"])
	}
	if got := aOf(dnsAddr(w1), "W1.Alpha.Mesh"); got != overlay["w1"] {
		t.Errorf("w1 answers its own name (mixed case) with %s", got)
	}
	if strings.Contains(w1.Logs(), "dns zone not built") {
		t.Error("w1 logged a zone it could not build")
	}
}

// TestNamesPortTaken: with the loopback DNS address's port held by
// another server, the node still forms its cluster and answers its names
// on the overlay address; status lists the address not served, with a
// DNSNotServed warning, and resolved is never pointed anywhere.
func TestNamesPortTaken(t *testing.T) {
	ip := agenttest.TakeIP(t)
	addr := net.JoinHostPort(ip, strconv.Itoa(agenttest.DNSPort))
	other, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c1 := agenttest.NewNodeAt(t, "c1", ip, &agenttest.Clock{})
	c1.Init(t, "alpha")
	st, err := c1.Client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "running" || st.DNS == nil || len(st.DNS.Listening) != 1 || len(st.DNS.NotServed) != 1 ||
		!strings.HasPrefix(st.DNS.NotServed[0], addr+": ") {
		t.Fatalf("status with the loopback port taken: state %s, dns %+v", st.State, st.DNS)
	}
	if ovl := st.DNS.Listening[0]; !strings.HasPrefix(ovl, st.OverlayIP+":") {
		t.Fatalf("listening on %s, want the overlay address %s", ovl, st.OverlayIP)
	}
	found := false
	for _, w := range st.Warnings {
		found = found || w.Code == codes.DNSNotServed && strings.Contains(w.Detail, addr)
	}
	if !found {
		t.Fatalf("no %s warning naming %s: %+v", codes.DNSNotServed, addr, st.Warnings)
	}
	if st.DNS.Resolved != "off" {
		t.Fatalf("resolved %q, want off (userspace mode)", st.DNS.Resolved)
	}
}
