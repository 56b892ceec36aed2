package names

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// ptr answers a name in one of the overlay's reverse zones, that of
// overlay, read (parseReverse, parseReverse6) as addr, full, ok.
func (z *Zone) ptr(resp *dns.Msg, q dns.Question, overlay netip.Prefix, addr netip.Addr, full, ok bool) {
	switch {
	case !ok, full && !overlay.Contains(addr):
		resp.Rcode = dns.RcodeNameError
		resp.Ns = append(resp.Ns, dns.Copy(z.soa))
		return
	case !full: // an empty non-terminal (or the zone's apex): it exists, with no records
		resp.Ns = append(resp.Ns, dns.Copy(z.soa))
		return
	}
	host, ok := z.byAddr[addr]
	if !ok {
		resp.Rcode = dns.RcodeNameError
		resp.Ns = append(resp.Ns, dns.Copy(z.soa))
		return
	}
	if q.Qtype != dns.TypePTR && q.Qtype != dns.TypeANY {
		resp.Ns = append(resp.Ns, dns.Copy(z.soa))
		return
	}
	resp.Answer = append(resp.Answer, &dns.PTR{
		Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: TTL},
		Ptr: host,
	})
}

// reverseZone is the in-addr.arpa zone that holds overlay, its prefix
// rounded down to whole octets: 10.42.0.0/16 and 10.42.16.0/20 are both
// in 42.10.in-addr.arpa.
func reverseZone(overlay netip.Prefix) string {
	b := overlay.Addr().As4()
	octets := overlay.Bits() / 8
	labels := make([]string, 0, octets+2)
	for i := octets - 1; i >= 0; i-- {
		labels = append(labels, strconv.Itoa(int(b[i])))
	}
	return strings.Join(append(labels, "in-addr", "arpa"), ".") + "."
}

// reverseZone6 is the ip6.arpa zone that holds overlay6, its prefix
// rounded down to whole nibbles: fd5a:1b2c:3d4e::/64 and
// fd5a:1b2c:3d4e::/66 are both in
// 0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa.
func reverseZone6(overlay6 netip.Prefix) (string, error) {
	arpa, err := dns.ReverseAddr(overlay6.Addr().String()) // 32 one-nibble labels, least significant first
	if err != nil {
		return "", fmt.Errorf("dns: IPv6 overlay %s: %w", overlay6, err)
	}
	if len(arpa) != 2*32+len("ip6.arpa.") { // an IPv4-mapped address gives an in-addr.arpa name
		return "", fmt.Errorf("dns: IPv6 overlay %s: reverse name %s", overlay6, arpa)
	}
	return arpa[2*(32-overlay6.Bits()/4):], nil // each nibble's label is two bytes, "x."
}

// parseReverse reads an in-addr.arpa name: full says all four octets are
// there (addr is the address); ok is false when a label is not an octet
// or there are more than four.
func parseReverse(name string) (addr netip.Addr, full, ok bool) {
	rest, found := strings.CutSuffix(name, "in-addr.arpa.")
	if !found {
		return netip.Addr{}, false, false
	}
	rest = strings.TrimSuffix(rest, ".")
	if rest == "" {
		return netip.Addr{}, false, true
	}
	labels := strings.Split(rest, ".")
	if len(labels) > 4 {
		return netip.Addr{}, false, false
	}
	var b [4]byte
	for i, l := range labels {
		v, err := strconv.ParseUint(l, 10, 8)
		if err != nil || (len(l) > 1 && l[0] == '0') {
			return netip.Addr{}, false, false
		}
		b[len(labels)-1-i] = byte(v)
	}
	if len(labels) < 4 {
		return netip.Addr{}, false, true
	}
	return netip.AddrFrom4(b), true, true
}

// parseReverse6 reads an ip6.arpa name, as parseReverse does: full says
// all 32 nibbles are there (addr is the address); ok is false when a
// label is not one hex digit or there are more than 32. name is lower
// case.
func parseReverse6(name string) (addr netip.Addr, full, ok bool) {
	rest, found := strings.CutSuffix(name, "ip6.arpa.")
	if !found {
		return netip.Addr{}, false, false
	}
	rest = strings.TrimSuffix(rest, ".")
	if rest == "" {
		return netip.Addr{}, false, true
	}
	labels := strings.Split(rest, ".")
	if len(labels) > 32 {
		return netip.Addr{}, false, false
	}
	var b [16]byte
	for i, l := range labels {
		if len(l) != 1 {
			return netip.Addr{}, false, false
		}
		v := strings.IndexByte("0123456789abcdef", l[0])
		if v < 0 {
			return netip.Addr{}, false, false
		}
		n := len(labels) - 1 - i // the nibble's place, most significant first
		b[n/2] |= byte(v) << (4 * (1 - n%2))
	}
	if len(labels) < 32 {
		return netip.Addr{}, false, true
	}
	return netip.AddrFrom16(b), true, true
}
