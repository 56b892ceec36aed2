package names

import (
	"log/slog"
	"testing"

	"github.com/miekg/dns"
)

// FuzzAnswer feeds the query handler arbitrary packets: whatever parses
// gets an answer that packs within MaxAnswer, parses back, carries the
// query's id and question, and is one of the rcodes the zone gives; no
// input panics. Part of `make test`'s short fuzz.
func FuzzAnswer(f *testing.F) {
	for _, q := range []*dns.Msg{
		query("w1.prod.mesh.", dns.TypeA), query("3.0.42.10.in-addr.arpa.", dns.TypePTR),
		query("example.com.", dns.TypeA), query("prod.mesh.", dns.TypeSOA),
		query("0.42.10.in-addr.arpa.", dns.TypeANY),
	} {
		b, err := q.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 1, 2})
	s := NewServer(Limits{}, slog.New(slog.DiscardHandler), nil)
	s.SetZone(testZone(f))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		req := new(dns.Msg)
		if req.Unpack(pkt) != nil || len(req.Question) != 1 {
			return // the library drops these before the handler (TestServerDropsJunk)
		}
		resp := s.Answer(req)
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
		if len(back.Answer) > 1 {
			t.Fatalf("%d answers", len(back.Answer))
		}
	})
}
