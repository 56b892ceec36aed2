package names

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func testZone(t testing.TB) *Zone {
	t.Helper()
	z, err := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), netip.Prefix{}, []Host{
		{Name: "c1", Addr: netip.MustParseAddr("10.42.0.1")},
		{Name: "w1", Addr: netip.MustParseAddr("10.42.0.3")},
		{Name: "w2", Addr: netip.MustParseAddr("10.42.1.7")},
		{Name: "dup", Addr: netip.MustParseAddr("10.42.0.3")},      // address taken: left out
		{Name: "far", Addr: netip.MustParseAddr("10.43.0.1")},      // outside the overlay: left out
		{Name: "Bad_Name", Addr: netip.MustParseAddr("10.42.0.9")}, // not a label: left out
		// An IPv4-only cluster: an Addr6 given anyway is left out.
		{Name: "w6", Addr: netip.MustParseAddr("10.42.0.6"), Addr6: netip.MustParseAddr("fd5a:1b2c:3d4e::6")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// overlay6 is testZone6's IPv6 overlay.
var overlay6 = netip.MustParsePrefix("fd5a:1b2c:3d4e::/64")

// testZone6 is a dual-stack cluster's zone: testZone's hosts with IPv6
// addresses, and the ways an Addr6 is left out.
func testZone6(t testing.TB) *Zone {
	t.Helper()
	z, err := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), overlay6, dualHosts())
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func dualHosts() []Host {
	a := netip.MustParseAddr
	return []Host{
		{Name: "c1", Addr: a("10.42.0.1"), Addr6: a("fd5a:1b2c:3d4e::a1")},
		{Name: "w1", Addr: a("10.42.0.3"), Addr6: a("fd5a:1b2c:3d4e::3")},
		{Name: "w2", Addr: a("10.42.1.7")},                                     // no IPv6 address: an A only
		{Name: "w3", Addr: a("10.42.0.4"), Addr6: a("fd5a:1b2c:3d4f::4")},      // Addr6 outside overlay6: left out
		{Name: "w4", Addr: a("10.42.0.5"), Addr6: a("fd5a:1b2c:3d4e::3")},      // Addr6 taken (w1's): left out
		{Name: "w5", Addr: a("10.42.0.6"), Addr6: a("::ffff:10.42.0.6")},       // IPv4-mapped: outside overlay6
		{Name: "dup", Addr: a("10.42.0.3"), Addr6: a("fd5a:1b2c:3d4e::99")},    // address taken: left out, Addr6 too
		{Name: "w1", Addr: a("10.42.0.8"), Addr6: a("fd5a:1b2c:3d4e::98")},     // name taken: left out, Addr6 too
		{Name: "far", Addr: a("10.43.0.1"), Addr6: a("fd5a:1b2c:3d4e::97")},    // outside the overlay: left out, Addr6 too
		{Name: "w7", Addr: a("10.42.0.7"), Addr6: a("fd5a:1b2c:3d4e::7%eth0")}, // a zone: not an overlay address
	}
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// answerCase is a question, and the rcode, records and authority of its
// answer.
type answerCase struct {
	q      string
	qtype  uint16
	rcode  int
	answer string // the answers' values in order, space-separated, "" for none
	soa    bool   // the SOA in the authority section (negative answers)
}

// TestZoneAnswer: every kind of question the zone of an IPv4-only cluster
// is asked, and its answer's rcode, records and authority.
func TestZoneAnswer(t *testing.T) {
	z := testZone(t)
	checkAnswers(t, z, []answerCase{
		{"w1.prod.mesh.", dns.TypeA, dns.RcodeSuccess, "10.42.0.3", false},
		{"W1.Prod.MESH.", dns.TypeA, dns.RcodeSuccess, "10.42.0.3", false}, // case-insensitive
		{"w2.prod.mesh.", dns.TypeANY, dns.RcodeSuccess, "10.42.1.7", false},
		{"w1.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true}, // NODATA: an IPv4-only cluster
		{"w6.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true}, // its Addr6 left out
		{"w6.prod.mesh.", dns.TypeANY, dns.RcodeSuccess, "10.42.0.6", false},
		{"gone.prod.mesh.", dns.TypeAAAA, dns.RcodeNameError, "", true},
		{"w1.prod.mesh.", dns.TypeTXT, dns.RcodeSuccess, "", true},
		{"gone.prod.mesh.", dns.TypeA, dns.RcodeNameError, "", true},
		{"dup.prod.mesh.", dns.TypeA, dns.RcodeNameError, "", true},
		{"far.prod.mesh.", dns.TypeA, dns.RcodeNameError, "", true},
		{"a.w1.prod.mesh.", dns.TypeA, dns.RcodeNameError, "", true},
		{"prod.mesh.", dns.TypeSOA, dns.RcodeSuccess, "ns.prod.mesh.", false},
		{"prod.mesh.", dns.TypeA, dns.RcodeSuccess, "", true},
		{"3.0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "w1.prod.mesh.", false},
		{"7.1.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "w2.prod.mesh.", false},
		{"9.9.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, "", true},
		{"3.0.42.10.in-addr.arpa.", dns.TypeA, dns.RcodeSuccess, "", true},
		{"0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "", true}, // an empty non-terminal
		{"42.10.in-addr.arpa.", dns.TypeSOA, dns.RcodeSuccess, "", true},
		{"x.0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, "", true},
		{"1.3.0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, "", true},
		{"03.0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, "", true},
		{"1.0.43.10.in-addr.arpa.", dns.TypePTR, dns.RcodeRefused, "", false}, // another network's reverse zone
		{"example.com.", dns.TypeA, dns.RcodeRefused, "", false},              // never forwarded
		{"mesh.", dns.TypeA, dns.RcodeRefused, "", false},
		{"other.mesh.", dns.TypeA, dns.RcodeRefused, "", false},
		{".", dns.TypeNS, dns.RcodeRefused, "", false},
		// No IPv6 overlay: the zone claims no ip6.arpa name.
		{"6.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.", dns.TypePTR, dns.RcodeRefused, "", false},
		{"ip6.arpa.", dns.TypeSOA, dns.RcodeRefused, "", false},
	})
	if z.Len() != 4 {
		t.Errorf("zone holds %d hosts, want 4 (c1, w1, w2, w6)", z.Len())
	}
}

// TestZoneAnswer6: the questions a dual-stack cluster's zone is asked:
// AAAA beside A, the IPv6 reverse zone's PTRs, and every Addr6 left out.
func TestZoneAnswer6(t *testing.T) {
	z := testZone6(t)
	// w1's PTR name written out, nibble by nibble, least significant first.
	const w1PTR = "3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa."
	rev := func(a string) string {
		r, err := dns.ReverseAddr(a)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	checkAnswers(t, z, []answerCase{
		{"w1.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "fd5a:1b2c:3d4e::3", false},
		{"W1.Prod.MESH.", dns.TypeAAAA, dns.RcodeSuccess, "fd5a:1b2c:3d4e::3", false},
		{"w1.prod.mesh.", dns.TypeA, dns.RcodeSuccess, "10.42.0.3", false},
		{"w1.prod.mesh.", dns.TypeANY, dns.RcodeSuccess, "10.42.0.3 fd5a:1b2c:3d4e::3", false},
		{"c1.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "fd5a:1b2c:3d4e::a1", false},
		{"w1.prod.mesh.", dns.TypeTXT, dns.RcodeSuccess, "", true},
		{"w2.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true}, // NODATA: no IPv6 address
		{"w2.prod.mesh.", dns.TypeANY, dns.RcodeSuccess, "10.42.1.7", false},
		{"w3.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true}, // outside overlay6
		{"w3.prod.mesh.", dns.TypeA, dns.RcodeSuccess, "10.42.0.4", false},
		{"w4.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true}, // w1's
		{"w4.prod.mesh.", dns.TypeA, dns.RcodeSuccess, "10.42.0.5", false},
		{"w5.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true},
		{"w7.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true},
		{"gone.prod.mesh.", dns.TypeAAAA, dns.RcodeNameError, "", true},
		{"dup.prod.mesh.", dns.TypeAAAA, dns.RcodeNameError, "", true},
		{"far.prod.mesh.", dns.TypeAAAA, dns.RcodeNameError, "", true},
		{"prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true},
		{w1PTR, dns.TypePTR, dns.RcodeSuccess, "w1.prod.mesh.", false},
		{rev("fd5a:1b2c:3d4e::3"), dns.TypeANY, dns.RcodeSuccess, "w1.prod.mesh.", false},
		{rev("fd5a:1b2c:3d4e::a1"), dns.TypePTR, dns.RcodeSuccess, "c1.prod.mesh.", false},
		{strings.ToUpper(rev("fd5a:1b2c:3d4e::a1")), dns.TypePTR, dns.RcodeSuccess, "c1.prod.mesh.", false},
		{"3.0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "w1.prod.mesh.", false}, // IPv4 PTRs as before
		{w1PTR, dns.TypeAAAA, dns.RcodeSuccess, "", true},
		{rev("fd5a:1b2c:3d4e::5"), dns.TypePTR, dns.RcodeNameError, "", true},  // nobody's
		{rev("fd5a:1b2c:3d4e::99"), dns.TypePTR, dns.RcodeNameError, "", true}, // dup's, left out
		{rev("fd5a:1b2c:3d4e::98"), dns.TypePTR, dns.RcodeNameError, "", true}, // the second w1's, left out
		{rev("fd5a:1b2c:3d4e::97"), dns.TypePTR, dns.RcodeNameError, "", true}, // far's, left out
		{rev("fd5a:1b2c:3d4e::7"), dns.TypePTR, dns.RcodeNameError, "", true},  // w7's (with a zone), left out
		{rev("fd5a:1b2c:3d4e::4"), dns.TypePTR, dns.RcodeNameError, "", true},
		{rev("fd5a:1b2c:3d4f::4"), dns.TypePTR, dns.RcodeRefused, "", false}, // another network's reverse zone
		{rev("fd5a:1b2c:3d4e:1::3"), dns.TypePTR, dns.RcodeRefused, "", false},
		{"0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.", dns.TypeSOA, dns.RcodeSuccess, "", true},         // the reverse zone's apex
		{"0.0.0.0.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.", dns.TypePTR, dns.RcodeSuccess, "", true}, // an empty non-terminal
		{"x." + w1PTR[2:], dns.TypePTR, dns.RcodeNameError, "", true},
		{"3a." + w1PTR[2:], dns.TypePTR, dns.RcodeNameError, "", true}, // read as 3 it would be w1
		{"1." + w1PTR, dns.TypePTR, dns.RcodeNameError, "", true},      // 33 nibbles
		{"d.f.ip6.arpa.", dns.TypePTR, dns.RcodeRefused, "", false},
	})
	if z.Len() != 7 {
		t.Errorf("zone holds %d hosts, want 7 (c1, w1-w5, w7)", z.Len())
	}
}

// checkAnswers asks z each case's question and checks its answer.
func checkAnswers(t *testing.T, z *Zone, cases []answerCase) {
	t.Helper()
	for _, c := range cases {
		resp := z.Answer(query(c.q, c.qtype))
		if resp.Rcode != c.rcode {
			t.Errorf("%s %s: rcode %s, want %s", c.q, dns.TypeToString[c.qtype], dns.RcodeToString[resp.Rcode], dns.RcodeToString[c.rcode])
			continue
		}
		var got []string
		for _, rr := range resp.Answer {
			switch rr := rr.(type) {
			case *dns.A:
				got = append(got, rr.A.String())
			case *dns.AAAA:
				got = append(got, rr.AAAA.String())
			case *dns.PTR:
				got = append(got, rr.Ptr)
			case *dns.SOA:
				got = append(got, rr.Ns)
			default:
				got = append(got, rr.String())
			}
			if h := rr.Header(); h.Name != c.q || h.Ttl != TTL {
				t.Errorf("%s: answer named %q with TTL %d, want the question's name and %d", c.q, h.Name, h.Ttl, TTL)
			}
		}
		if got := strings.Join(got, " "); got != c.answer {
			t.Errorf("%s %s: answer %q, want %q", c.q, dns.TypeToString[c.qtype], got, c.answer)
		}
		if soa := len(resp.Ns) == 1; soa != c.soa {
			t.Errorf("%s %s: SOA in authority %v, want %v", c.q, dns.TypeToString[c.qtype], soa, c.soa)
		}
		if resp.Rcode != dns.RcodeRefused && !resp.Authoritative {
			t.Errorf("%s: not authoritative", c.q)
		}
		if resp.RecursionAvailable {
			t.Errorf("%s: says recursion is available", c.q)
		}
	}
}

// TestZoneClass: a class other than IN is refused.
func TestZoneClass(t *testing.T) {
	m := query("w1.prod.mesh.", dns.TypeA)
	m.Question[0].Qclass = dns.ClassCHAOS
	if rc := testZone(t).Answer(m).Rcode; rc != dns.RcodeRefused {
		t.Fatalf("CHAOS class: %s, want REFUSED", dns.RcodeToString[rc])
	}
}

func TestReverseZone(t *testing.T) {
	for _, c := range []struct{ prefix, want string }{
		{"10.42.0.0/16", "42.10.in-addr.arpa."},
		{"10.42.16.0/20", "42.10.in-addr.arpa."},
		{"10.0.0.0/8", "10.in-addr.arpa."},
		{"192.168.7.0/24", "7.168.192.in-addr.arpa."},
		{"192.168.7.16/28", "7.168.192.in-addr.arpa."},
	} {
		if got := reverseZone(netip.MustParsePrefix(c.prefix)); got != c.want {
			t.Errorf("%s: %s, want %s", c.prefix, got, c.want)
		}
	}
	// A /20's reverse zone holds addresses outside it: NXDOMAIN, not a PTR.
	z, err := NewZone("c", "mesh", netip.MustParsePrefix("10.42.16.0/20"), netip.Prefix{}, []Host{{Name: "a", Addr: netip.MustParseAddr("10.42.16.1")}})
	if err != nil {
		t.Fatal(err)
	}
	if rc := z.Answer(query("1.0.42.10.in-addr.arpa.", dns.TypePTR)).Rcode; rc != dns.RcodeNameError {
		t.Errorf("outside the /20 in its reverse zone: %s, want NXDOMAIN", dns.RcodeToString[rc])
	}
	if r := z.Answer(query("1.16.42.10.in-addr.arpa.", dns.TypePTR)); len(r.Answer) != 1 {
		t.Errorf("a's PTR: %v", r)
	}
}

// TestReverseZone6: the ip6.arpa zone of an IPv6 overlay is its prefix
// rounded down to whole nibbles, and a PTR in it is answered only inside
// the overlay.
func TestReverseZone6(t *testing.T) {
	for _, c := range []struct{ prefix, want string }{
		{"fd5a:1b2c:3d4e::/64", "0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa."},
		{"fd5a:1b2c:3d4e::/66", "0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa."},
		{"fd5a:1b2c:3d4e:0:a000::/67", "0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa."},
		{"fd5a:1b2c:3d4e:0:a000::/68", "a.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa."},
		{"fd00:1:2:3:4:5:6:7770/124", "7.7.7.6.0.0.0.5.0.0.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.0.0.d.f.ip6.arpa."},
	} {
		got, err := reverseZone6(netip.MustParsePrefix(c.prefix))
		if err != nil || got != c.want {
			t.Errorf("%s: %s %v, want %s", c.prefix, got, err, c.want)
		}
	}
	// A /66's reverse zone, the /64's, holds addresses outside it:
	// NXDOMAIN, not a PTR.
	z, err := NewZone("c", "mesh", netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("fd5a:1b2c:3d4e:0:4000::/66"), []Host{
		{Name: "a", Addr: netip.MustParseAddr("10.42.0.1"), Addr6: netip.MustParseAddr("fd5a:1b2c:3d4e:0:4000::1")},
		{Name: "b", Addr: netip.MustParseAddr("10.42.0.2"), Addr6: netip.MustParseAddr("fd5a:1b2c:3d4e::2")}, // outside the /66
	})
	if err != nil {
		t.Fatal(err)
	}
	checkAnswers(t, z, []answerCase{
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.4.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.", dns.TypePTR, dns.RcodeSuccess, "a.c.mesh.", false},
		{"2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.", dns.TypePTR, dns.RcodeNameError, "", true},
		{"b.c.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true},
	})
}

// TestNewZoneOverlay6: an IPv6 overlay that is not an IPv6 network of
// /64 to /124 is refused; the zero Prefix is an IPv4-only cluster.
func TestNewZoneOverlay6(t *testing.T) {
	overlay := netip.MustParsePrefix("10.42.0.0/16")
	for _, c := range []struct {
		name     string
		overlay6 netip.Prefix
		ok       bool
	}{
		{"ok/none", netip.Prefix{}, true},
		{"ok/64", netip.MustParsePrefix("fd5a:1b2c:3d4e::/64"), true},
		{"ok/66", netip.MustParsePrefix("fd5a:1b2c:3d4e::/66"), true},
		{"ok/124", netip.MustParsePrefix("fd5a:1b2c:3d4e::10/124"), true},
		{"ok/host-bits", netip.MustParsePrefix("fd5a:1b2c:3d4e::5/64"), true}, // masked
		{"fail/ipv4", netip.MustParsePrefix("10.43.0.0/16"), false},
		{"fail/4in6", netip.MustParsePrefix("::ffff:10.42.0.0/112"), false},
		{"fail/48", netip.MustParsePrefix("fd5a:1b2c:3d4e::/48"), false},
		{"fail/63", netip.MustParsePrefix("fd5a:1b2c:3d4e::/63"), false},
		{"fail/125", netip.MustParsePrefix("fd5a:1b2c:3d4e::/125"), false},
		{"fail/128", netip.MustParsePrefix("fd5a:1b2c:3d4e::1/128"), false},
		{"fail/invalid", netip.PrefixFrom(netip.MustParseAddr("fd5a:1b2c:3d4e::"), 129), false},
	} {
		z, err := NewZone("prod", "mesh", overlay, c.overlay6, nil)
		if (err == nil) != c.ok {
			t.Errorf("%s (%s): error %v, want ok %v", c.name, c.overlay6, err, c.ok)
			continue
		}
		if err != nil {
			continue
		}
		want, _ := NewZone("prod", "mesh", overlay, c.overlay6.Masked(), nil)
		if !z.Equal(want) {
			t.Errorf("%s: zone of %s differs from the masked prefix's", c.name, c.overlay6)
		}
	}
}

func TestValidDomain(t *testing.T) {
	for _, ok := range []string{"mesh", "corp.example", "a-b.c1"} {
		if err := ValidDomain(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "mesh.", ".mesh", "Mesh", "a..b", "-a.b", "local", "x.local", "localhost", "in-addr.arpa",
		"onion", "under_score", strings.Repeat("a.", 63) + "a"} {
		if err := ValidDomain(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := NewZone("prod", "local", netip.MustParsePrefix("10.42.0.0/16"), netip.Prefix{}, nil); err == nil {
		t.Error("NewZone took domain local")
	}
	if _, err := NewZone("Prod!", "mesh", netip.MustParsePrefix("10.42.0.0/16"), netip.Prefix{}, nil); err == nil {
		t.Error("NewZone took a cluster name that is not a label")
	}
}

func TestZoneLookupEqual(t *testing.T) {
	z := testZone(t)
	if a, ok := z.Lookup("w1.prod.mesh."); !ok || a != netip.MustParseAddr("10.42.0.3") {
		t.Errorf("Lookup w1.prod.mesh.: %v %v", a, ok)
	}
	if a, ok := z.Lookup("w2"); !ok || a != netip.MustParseAddr("10.42.1.7") {
		t.Errorf("Lookup w2: %v %v", a, ok)
	}
	for in, want := range map[string]string{"w1.prod.mesh": "w1", "W1.Prod.Mesh.": "w1", "gone.prod.mesh": "gone",
		"w1": "w1", "w1.other.mesh": "w1.other.mesh", "a.b.prod.mesh": "a.b.prod.mesh", "prod.mesh": "prod.mesh"} {
		if got := z.NodeName(in); got != want {
			t.Errorf("NodeName(%q) = %q, want %q", in, got, want)
		}
	}
	if z.FQDN("w1") != "w1.prod.mesh" || z.Origin() != "prod.mesh" {
		t.Errorf("FQDN %q origin %q", z.FQDN("w1"), z.Origin())
	}
	if !z.Equal(testZone(t)) {
		t.Error("two zones of the same hosts differ")
	}
	other, _ := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), netip.Prefix{}, []Host{{Name: "c1", Addr: netip.MustParseAddr("10.42.0.1")}})
	if z.Equal(other) || other.Equal(nil) {
		t.Error("different zones equal")
	}
	if a, ok := z.Lookup6("w1"); ok {
		t.Errorf("Lookup6 w1 in an IPv4-only zone: %v", a)
	}
}

// TestZoneLookupEqual6: Lookup6 gives a member's IPv6 address; Equal sees
// an Addr6 changed, added or removed and a changed IPv6 overlay.
func TestZoneLookupEqual6(t *testing.T) {
	z := testZone6(t)
	for name, want := range map[string]string{"w1": "fd5a:1b2c:3d4e::3", "W1.prod.mesh.": "fd5a:1b2c:3d4e::3", "c1.prod.mesh": "fd5a:1b2c:3d4e::a1"} {
		if a, ok := z.Lookup6(name); !ok || a != netip.MustParseAddr(want) {
			t.Errorf("Lookup6 %s: %v %v, want %s", name, a, ok, want)
		}
	}
	for _, name := range []string{"w2", "w3", "w4", "gone"} {
		if a, ok := z.Lookup6(name); ok {
			t.Errorf("Lookup6 %s: %v, want none", name, a)
		}
	}
	if a, ok := z.Lookup("w1"); !ok || a != netip.MustParseAddr("10.42.0.3") {
		t.Errorf("Lookup w1: %v %v", a, ok)
	}
	if !z.Equal(testZone6(t)) {
		t.Error("two zones of the same hosts differ")
	}
	edit := func(f func(hs []Host) []Host) *Zone {
		z, err := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), overlay6, f(dualHosts()))
		if err != nil {
			t.Fatal(err)
		}
		return z
	}
	for name, o := range map[string]*Zone{
		"changed": edit(func(hs []Host) []Host { hs[1].Addr6 = netip.MustParseAddr("fd5a:1b2c:3d4e::33"); return hs }),
		"removed": edit(func(hs []Host) []Host { hs[1].Addr6 = netip.Addr{}; return hs }),
		"added":   edit(func(hs []Host) []Host { hs[2].Addr6 = netip.MustParseAddr("fd5a:1b2c:3d4e::2"); return hs }),
	} {
		if z.Equal(o) || o.Equal(z) {
			t.Errorf("Addr6 %s: zones equal", name)
		}
	}
	// Same hosts, no Addr6 in either: only the IPv6 overlay differs.
	a, _ := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), netip.Prefix{}, nil)
	b, _ := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), overlay6, nil)
	if a.Equal(b) || b.Equal(a) {
		t.Error("zones with and without an IPv6 overlay equal")
	}
}
