package names

import (
	"log/slog"
	"testing"

	"github.com/miekg/dns"
)

// FuzzAnswer feeds the query handler arbitrary packets: whatever parses
// gets an answer, from an IPv4-only zone and from a dual-stack one, that
// packs within MaxAnswer, parses back, carries the query's id and
// question, holds at most two records (ANY: the A and the AAAA), and is
// one of the rcodes the zone gives; no input panics. Part of `make
// test`'s short fuzz.
func FuzzAnswer(f *testing.F) {
	for _, q := range []*dns.Msg{
		query("w1.prod.mesh.", dns.TypeA), query("3.0.42.10.in-addr.arpa.", dns.TypePTR),
		query("example.com.", dns.TypeA), query("prod.mesh.", dns.TypeSOA),
		query("0.42.10.in-addr.arpa.", dns.TypeANY),
		query("w1.prod.mesh.", dns.TypeAAAA), query("w1.prod.mesh.", dns.TypeANY),
		query("3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.", dns.TypePTR),
		query("0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.", dns.TypeANY),
	} {
		b, err := q.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 1, 2})
	s4 := NewServer(Limits{}, slog.New(slog.DiscardHandler), nil)
	s4.SetZone(testZone(f))
	s6 := NewServer(Limits{}, slog.New(slog.DiscardHandler), nil)
	s6.SetZone(testZone6(f))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		req := new(dns.Msg)
		if req.Unpack(pkt) != nil || len(req.Question) != 1 {
			return // the library drops these before the handler (TestServerDropsJunk)
		}
		for _, s := range []*Server{s4, s6} {
			checkFuzzAnswer(t, req, s.Answer(req))
		}
	})
}

// checkFuzzAnswer is FuzzAnswer's check of resp, the answer to req.
func checkFuzzAnswer(t *testing.T, req, resp *dns.Msg) {
	t.Helper()
	resp.Truncate(MaxAnswer)
	b, err := resp.Pack()
	if err != nil {
		t.Fatalf("answer does not pack: %v", err)
	}
	if len(b) > MaxAnswer {
		t.Fatalf("answer of %d bytes, over %d", len(b), MaxAnswer)
	}
	back := new(dns.Msg)
	if err := back.Unpack(b); err != nil {
		t.Fatalf("answer does not parse back: %v", err)
	}
	if back.Id != req.Id || len(back.Question) != 1 || !back.Response {
		t.Fatalf("answer %v to %v", back, req)
	}
	switch back.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeRefused:
	default:
		t.Fatalf("rcode %s", dns.RcodeToString[back.Rcode])
	}
	if len(back.Answer) > 2 {
		t.Fatalf("%d answers", len(back.Answer))
	}
}
