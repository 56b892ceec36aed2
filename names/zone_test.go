package names

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func testZone(t testing.TB) *Zone {
	t.Helper()
	z, err := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), []Host{
		{"c1", netip.MustParseAddr("10.42.0.1")},
		{"w1", netip.MustParseAddr("10.42.0.3")},
		{"w2", netip.MustParseAddr("10.42.1.7")},
		{"dup", netip.MustParseAddr("10.42.0.3")},      // address taken: left out
		{"far", netip.MustParseAddr("10.43.0.1")},      // outside the overlay: left out
		{"Bad_Name", netip.MustParseAddr("10.42.0.9")}, // not a label: left out
	})
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// TestZoneAnswer: every kind of question the zone is asked, and its
// answer's rcode, records and authority.
func TestZoneAnswer(t *testing.T) {
	z := testZone(t)
	cases := []struct {
		q      string
		qtype  uint16
		rcode  int
		answer string // the one answer's value, "" for none
		soa    bool   // the SOA in the authority section (negative answers)
	}{
		{"w1.prod.mesh.", dns.TypeA, dns.RcodeSuccess, "10.42.0.3", false},
		{"W1.Prod.MESH.", dns.TypeA, dns.RcodeSuccess, "10.42.0.3", false}, // case-insensitive
		{"w2.prod.mesh.", dns.TypeANY, dns.RcodeSuccess, "10.42.1.7", false},
		{"w1.prod.mesh.", dns.TypeAAAA, dns.RcodeSuccess, "", true}, // NODATA: no IPv6 yet
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
	}
	for _, c := range cases {
		resp := z.Answer(query(c.q, c.qtype))
		if resp.Rcode != c.rcode {
			t.Errorf("%s %s: rcode %s, want %s", c.q, dns.TypeToString[c.qtype], dns.RcodeToString[resp.Rcode], dns.RcodeToString[c.rcode])
			continue
		}
		got := ""
		switch len(resp.Answer) {
		case 0:
		case 1:
			switch rr := resp.Answer[0].(type) {
			case *dns.A:
				got = rr.A.String()
			case *dns.PTR:
				got = rr.Ptr
			case *dns.SOA:
				got = rr.Ns
			}
			if h := resp.Answer[0].Header(); h.Name != c.q || h.Ttl != TTL {
				t.Errorf("%s: answer named %q with TTL %d, want the question's name and %d", c.q, h.Name, h.Ttl, TTL)
			}
		default:
			t.Errorf("%s: %d answers, want at most 1", c.q, len(resp.Answer))
		}
		if got != c.answer {
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
	if z.Len() != 3 {
		t.Errorf("zone holds %d hosts, want 3 (c1, w1, w2)", z.Len())
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
	z, err := NewZone("c", "mesh", netip.MustParsePrefix("10.42.16.0/20"), []Host{{"a", netip.MustParseAddr("10.42.16.1")}})
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
	if _, err := NewZone("prod", "local", netip.MustParsePrefix("10.42.0.0/16"), nil); err == nil {
		t.Error("NewZone took domain local")
	}
	if _, err := NewZone("Prod!", "mesh", netip.MustParsePrefix("10.42.0.0/16"), nil); err == nil {
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
	other, _ := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), []Host{{"c1", netip.MustParseAddr("10.42.0.1")}})
	if z.Equal(other) || other.Equal(nil) {
		t.Error("different zones equal")
	}
}
