package names

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshd/meshd/persource"
)

// serve starts a server on a free 127.0.0.1 port (UDP and TCP alike) and
// returns it with its address.
func serve(t testing.TB, limits Limits) (*Server, string) {
	t.Helper()
	s := NewServer(limits, slog.New(slog.DiscardHandler), nil)
	pc, ln := listenPair(t)
	if err := s.Serve(pc, ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, pc.LocalAddr().String()
}

// listenPair listens on a free 127.0.0.1 port for UDP and TCP alike. The
// kernel picks the UDP port; another test may hold that number for TCP
// ("address already in use", seen with -count=50), so it tries again.
func listenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 50 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		_ = pc.Close()
	}
	t.Fatal("no port free for both UDP and TCP in 50 tries")
	return nil, nil
}

func exchange(t testing.TB, network, addr string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, m.Question[0].Name, err)
	}
	return resp
}

// TestServer: over UDP and TCP a member's name answers its A, its address
// its PTR, a former name NXDOMAIN, a name outside the zones REFUSED;
// before the first zone everything is REFUSED; a zone swapped in answers
// at once; every answer is counted by rcode with its latency.
func TestServer(t *testing.T) {
	s, addr := serve(t, Limits{})
	if rc := exchange(t, "udp", addr, query("w1.prod.mesh.", dns.TypeA)).Rcode; rc != dns.RcodeRefused {
		t.Fatalf("before a zone: %s, want REFUSED", dns.RcodeToString[rc])
	}
	s.SetZone(testZone(t))
	for _, network := range []string{"udp", "tcp"} {
		r := exchange(t, network, addr, query("w1.prod.mesh.", dns.TypeA))
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.42.0.3" {
			t.Errorf("%s w1: %v", network, r)
		}
		r = exchange(t, network, addr, query("3.0.42.10.in-addr.arpa.", dns.TypePTR))
		if len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "w1.prod.mesh." {
			t.Errorf("%s PTR: %v", network, r)
		}
		if rc := exchange(t, network, addr, query("example.com.", dns.TypeA)).Rcode; rc != dns.RcodeRefused {
			t.Errorf("%s example.com: %s, want REFUSED", network, dns.RcodeToString[rc])
		}
	}
	z := testZone(t)
	delete(z.byName, "w1") // w1 removed
	s.SetZone(z)
	if rc := exchange(t, "udp", addr, query("w1.prod.mesh.", dns.TypeA)).Rcode; rc != dns.RcodeNameError {
		t.Errorf("w1 after its removal: %s, want NXDOMAIN", dns.RcodeToString[rc])
	}
	// An answer is counted once it was sent (ServeDNS), so the client
	// can read it a moment before the count: wait for the last one.
	st := s.Stats()
	for deadline := time.Now().Add(2 * time.Second); st.Latency.Count < 8 && time.Now().Before(deadline); st = s.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st.Queries != 8 || st.Rcodes["NOERROR"] != 4 || st.Rcodes["REFUSED"] != 3 || st.Rcodes["NXDOMAIN"] != 1 {
		t.Errorf("stats %+v, want 8 queries: 4 NOERROR, 3 REFUSED, 1 NXDOMAIN", st)
	}
	if st.Latency.Count != 8 || len(st.Latency.Counts) != len(LatencyBounds)+1 {
		t.Errorf("latency histogram %+v, want 8 observations", st.Latency)
	}
}

// TestServerIPv6: over UDP and TCP, a dual-stack zone's member answers
// its AAAA and its IPv6 address its PTR; an IPv4-only zone answers the
// AAAA NODATA and refuses the ip6.arpa name.
func TestServerIPv6(t *testing.T) {
	s, addr := serve(t, Limits{})
	const w1PTR = "3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa."
	s.SetZone(testZone6(t))
	for _, network := range []string{"udp", "tcp"} {
		r := exchange(t, network, addr, query("w1.prod.mesh.", dns.TypeAAAA))
		if len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "fd5a:1b2c:3d4e::3" || r.Answer[0].Header().Ttl != TTL {
			t.Errorf("%s w1 AAAA: %v", network, r)
		}
		r = exchange(t, network, addr, query(w1PTR, dns.TypePTR))
		if len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "w1.prod.mesh." || !r.Authoritative {
			t.Errorf("%s IPv6 PTR: %v", network, r)
		}
	}
	s.SetZone(testZone(t))
	r := exchange(t, "udp", addr, query("w1.prod.mesh.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Errorf("IPv4-only w1 AAAA: %v, want NODATA with the SOA", r)
	}
	if rc := exchange(t, "udp", addr, query(w1PTR, dns.TypePTR)).Rcode; rc != dns.RcodeRefused {
		t.Errorf("IPv4-only IPv6 PTR: %s, want REFUSED", dns.RcodeToString[rc])
	}
}

// TestServerEDNS: an EDNS0 query gets an OPT back whose size is capped at
// MaxAnswer, whatever it asked.
func TestServerEDNS(t *testing.T) {
	s, addr := serve(t, Limits{})
	s.SetZone(testZone(t))
	m := query("w2.prod.mesh.", dns.TypeA)
	m.SetEdns0(65000, false)
	r := exchange(t, "udp", addr, m)
	opt := r.IsEdns0()
	if opt == nil || opt.UDPSize() != MaxAnswer || len(r.Answer) != 1 {
		t.Fatalf("EDNS0 answer %v, want one A and an OPT of %d", r, MaxAnswer)
	}
}

// TestServerRateLimited: past its source's rate a query is dropped
// unanswered and counted.
func TestServerRateLimited(t *testing.T) {
	s, addr := serve(t, Limits{Source: persource.Limits{PerSource: 3, Window: time.Hour}})
	s.SetZone(testZone(t))
	for range 3 {
		exchange(t, "udp", addr, query("w1.prod.mesh.", dns.TypeA))
	}
	c := &dns.Client{Net: "udp", Timeout: 300 * time.Millisecond}
	if r, _, err := c.Exchange(query("w1.prod.mesh.", dns.TypeA), addr); err == nil {
		t.Fatalf("the 4th query in the window was answered: %v", r)
	}
	if st := s.Stats(); st.Limited != 1 || st.Queries != 3 {
		t.Fatalf("stats %+v, want 3 queries and 1 limited", st)
	}
}

// TestServerDropsJunk: what is not a plain query (too short, a response,
// another opcode, two questions, a body that does not parse) is dropped
// unanswered and counted malformed; the server answers the next query.
func TestServerDropsJunk(t *testing.T) {
	s, addr := serve(t, Limits{})
	s.SetZone(testZone(t))
	good, err := query("w1.prod.mesh.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	resp := new(dns.Msg).SetReply(query("w1.prod.mesh.", dns.TypeA))
	respB, _ := resp.Pack()
	notify := query("w1.prod.mesh.", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	notifyB, _ := notify.Pack()
	two := query("w1.prod.mesh.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	twoB, _ := two.Pack()
	cut := append([]byte(nil), good[:len(good)-3]...) // a header promising a question the body lacks
	junk := [][]byte{{1, 2, 3}, respB, notifyB, twoB, cut}

	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, j := range junk {
		if _, err := conn.Write(j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Write(good); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no answer to the good query after the junk: %v", err)
	}
	var got dns.Msg
	if err := got.Unpack(buf[:n]); err != nil {
		t.Fatalf("first packet back does not parse: %v", err)
	}
	if len(got.Answer) != 1 {
		t.Fatalf("first packet back: %v, want the good query's answer (junk must get none)", &got)
	}
	// Each packet is handled on its own goroutine: the count may trail
	// the answer by a moment.
	deadline := time.Now().Add(2 * time.Second)
	for s.Stats().Malformed != uint64(len(junk)) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := s.Stats(); st.Malformed != uint64(len(junk)) {
		t.Fatalf("malformed %d, want %d", st.Malformed, len(junk))
	}
	if st := s.Stats(); st.Queries != 1 {
		t.Fatalf("%d queries answered, want 1 (the good one)", st.Queries)
	}
}

// TestServerClose: Close stops both listeners; a second Serve is refused.
func TestServerClose(t *testing.T) {
	s, addr := serve(t, Limits{})
	if len(s.Addrs()) != 1 || s.Addrs()[0] != addr {
		t.Fatalf("Addrs %v, want [%s]", s.Addrs(), addr)
	}
	s.Close()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("TCP still accepted after Close")
	}
	pc, ln := listenPair(t)
	if err := s.Serve(pc, ln); err == nil {
		t.Fatal("Serve after Close accepted")
	}
}
