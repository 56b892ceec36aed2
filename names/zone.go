package names

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/meshd/meshd/enroll"
)

// TTL is every answer's time to live, positive and negative (the SOA's
// minimum), in seconds: a resolver that caches (systemd-resolved does)
// forgets a removed node and learns a joined one within it, inside the
// 2 s revocation bound a removal promises.
const TTL = 1

// DefaultDomain is dns.domain's default: members are NAME.CLUSTER.mesh.
const DefaultDomain = "mesh"

// Host is one name the zone answers: an active node and its overlay IPs.
type Host struct {
	Name  string // the node's name, a DNS label (enroll.ValidName)
	Addr  netip.Addr
	Addr6 netip.Addr // the IPv6 overlay address (issue 34); the zero Addr when the node or the cluster has none
}

// Zone is one node's view of the cluster's names, immutable once built:
// the forward zone CLUSTER.DOMAIN (an A record per active node, and an
// AAAA per node with an IPv6 overlay address) and the overlay's reverse
// zones (a PTR per address: in-addr.arpa, and ip6.arpa when the cluster
// has an IPv6 overlay). Build a new one on each change and hand it to
// Server.SetZone.
type Zone struct {
	origin   string // "prod.mesh.", lower case
	reverse  string // the overlay's reverse zone, "42.10.in-addr.arpa." for 10.42.0.0/16
	reverse6 string // the IPv6 overlay's, "0.0.0.0.e.4.d.3.c.2.b.1.a.5.d.f.ip6.arpa." for fd5a:1b2c:3d4e::/64; "" without one
	overlay  netip.Prefix
	overlay6 netip.Prefix          // the zero Prefix for an IPv4-only cluster
	byName   map[string]netip.Addr // "w1" -> 10.42.0.3
	byName6  map[string]netip.Addr // "w1" -> fd5a:1b2c:3d4e::3, for the hosts with one
	byAddr   map[netip.Addr]string // 10.42.0.3 and fd5a:1b2c:3d4e::3 -> "w1.prod.mesh."
	soa      *dns.SOA
}

// NewZone builds the zone of cluster under domain (ValidDomain) for the
// overlay network and, unless it is the zero Prefix (an IPv4-only
// cluster), the IPv6 overlay6, a network of /64 to /124. Hosts outside
// overlay, with a name that is not a DNS label, or with a name or address
// another host has already taken are left out; so is an Addr6 outside
// overlay6 or another host's (the host keeps its A). The FSM never
// records two, so a taken one is a corrupt input, not a choice.
func NewZone(cluster, domain string, overlay, overlay6 netip.Prefix, hosts []Host) (*Zone, error) {
	if err := ValidDomain(domain); err != nil {
		return nil, err
	}
	if !validLabel(cluster) {
		return nil, fmt.Errorf("dns: cluster name %q is not a DNS label", cluster)
	}
	if !overlay.IsValid() || !overlay.Addr().Is4() {
		return nil, fmt.Errorf("dns: overlay %s: want an IPv4 network", overlay)
	}
	if overlay6 != (netip.Prefix{}) {
		if !overlay6.IsValid() || !overlay6.Addr().Is6() || overlay6.Addr().Is4In6() || overlay6.Bits() < 64 || overlay6.Bits() > 124 {
			return nil, fmt.Errorf("dns: IPv6 overlay %s: want an IPv6 network of /64 to /124", overlay6)
		}
		overlay6 = overlay6.Masked()
	}
	overlay = overlay.Masked()
	z := &Zone{
		origin:   strings.ToLower(cluster + "." + domain + "."),
		reverse:  reverseZone(overlay),
		overlay:  overlay,
		overlay6: overlay6,
		byName:   make(map[string]netip.Addr, len(hosts)),
		byName6:  make(map[string]netip.Addr),
		byAddr:   make(map[netip.Addr]string, len(hosts)),
	}
	if overlay6.IsValid() {
		var err error
		if z.reverse6, err = reverseZone6(overlay6); err != nil {
			return nil, err
		}
	}
	for _, h := range hosts {
		name := strings.ToLower(h.Name)
		if !validLabel(name) || !overlay.Contains(h.Addr) {
			continue
		}
		if _, taken := z.byName[name]; taken {
			continue
		}
		if _, taken := z.byAddr[h.Addr]; taken {
			continue
		}
		z.byName[name] = h.Addr
		z.byAddr[h.Addr] = name + "." + z.origin
		if _, taken := z.byAddr[h.Addr6]; taken || !overlay6.IsValid() || !overlay6.Contains(h.Addr6) {
			continue
		}
		z.byName6[name] = h.Addr6
		z.byAddr[h.Addr6] = name + "." + z.origin
	}
	z.soa = &dns.SOA{
		Hdr:     dns.RR_Header{Name: z.origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: TTL},
		Ns:      "ns." + z.origin,
		Mbox:    "hostmaster." + z.origin,
		Serial:  1,
		Refresh: 3600, Retry: 600, Expire: 86400, Minttl: TTL,
	}
	return z, nil
}

// Origin is the forward zone without its final dot: "prod.mesh".
func (z *Zone) Origin() string { return strings.TrimSuffix(z.origin, ".") }

// FQDN is node's name in the zone without the final dot ("w1.prod.mesh"),
// whether or not the zone holds it.
func (z *Zone) FQDN(node string) string { return node + "." + z.Origin() }

// NodeName is the node name a command was given as name: a name in the
// zone ("w1.prod.mesh", any case, final dot or not) is its first label;
// anything else is returned as given (a plain node name, or a name the
// cluster's commands then refuse as unknown).
func (z *Zone) NodeName(name string) string {
	lower := strings.TrimSuffix(strings.ToLower(name), ".")
	if label, ok := strings.CutSuffix(lower, "."+z.Origin()); ok && validLabel(label) {
		return label
	}
	return name
}

// Len is how many hosts the zone answers for.
func (z *Zone) Len() int { return len(z.byName) }

// Lookup is the address the zone gives name (a node name or its FQDN):
// its A.
func (z *Zone) Lookup(name string) (netip.Addr, bool) {
	a, ok := z.byName[z.label(name)]
	return a, ok
}

// Lookup6 is the IPv6 address the zone gives name (a node name or its
// FQDN): its AAAA; false for a name without one.
func (z *Zone) Lookup6(name string) (netip.Addr, bool) {
	a, ok := z.byName6[z.label(name)]
	return a, ok
}

// label is name (a node name or its FQDN, any case, final dot or not)
// as the zone's maps hold it.
func (z *Zone) label(name string) string {
	return strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(name), "."), "."+z.Origin())
}

// Equal says whether two zones answer every question alike.
func (z *Zone) Equal(o *Zone) bool {
	if z == nil || o == nil {
		return z == o
	}
	if z.origin != o.origin || z.overlay != o.overlay || z.overlay6 != o.overlay6 {
		return false
	}
	return sameAddrs(z.byName, o.byName) && sameAddrs(z.byName6, o.byName6)
}

// sameAddrs says whether a and b map the same names to the same addresses.
func sameAddrs(a, b map[string]netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for n, x := range a {
		if y, ok := b[n]; !ok || x != y {
			return false
		}
	}
	return true
}

// Answer is the zone's reply to a query (one question, opcode QUERY): an
// A, or an AAAA when the member has an IPv6 overlay address (for ANY,
// both), for a member's name; a PTR for a member's overlay address, IPv4
// or IPv6; NXDOMAIN with the SOA for any other name in the zones;
// NOERROR without records, the SOA in authority, for another type of a
// name that exists (an AAAA of a member without an IPv6 address among
// them); REFUSED for a name outside the zones (ip6.arpa entirely when
// the cluster has no IPv6 overlay) or a class other than IN: the query
// is never forwarded anywhere.
func (z *Zone) Answer(req *dns.Msg) *dns.Msg {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = false
	if len(req.Question) != 1 {
		resp.Rcode = dns.RcodeFormatError
		return resp
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		resp.Rcode = dns.RcodeRefused
		return resp
	}
	name := strings.ToLower(q.Name)
	switch {
	case dns.IsSubDomain(z.origin, name):
		resp.Authoritative = true
		z.forward(resp, q, name)
	case dns.IsSubDomain(z.reverse, name):
		resp.Authoritative = true
		addr, full, ok := parseReverse(name)
		z.ptr(resp, q, z.overlay, addr, full, ok)
	case z.reverse6 != "" && dns.IsSubDomain(z.reverse6, name):
		resp.Authoritative = true
		addr, full, ok := parseReverse6(name)
		z.ptr(resp, q, z.overlay6, addr, full, ok)
	default:
		resp.Rcode = dns.RcodeRefused
	}
	return resp
}

// forward answers a name in CLUSTER.DOMAIN.
func (z *Zone) forward(resp *dns.Msg, q dns.Question, name string) {
	if name == z.origin {
		if q.Qtype == dns.TypeSOA || q.Qtype == dns.TypeANY {
			resp.Answer = append(resp.Answer, dns.Copy(z.soa))
			return
		}
		resp.Ns = append(resp.Ns, dns.Copy(z.soa)) // NODATA
		return
	}
	label := strings.TrimSuffix(name, "."+z.origin)
	addr, ok := z.byName[label]
	if !ok {
		resp.Rcode = dns.RcodeNameError
		resp.Ns = append(resp.Ns, dns.Copy(z.soa))
		return
	}
	if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
		resp.Answer = append(resp.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: TTL},
			A:   addr.AsSlice(),
		})
	}
	if addr6, ok := z.byName6[label]; ok && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY) {
		resp.Answer = append(resp.Answer, &dns.AAAA{
			Hdr:  dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: TTL},
			AAAA: addr6.AsSlice(),
		})
	}
	if len(resp.Answer) == 0 {
		resp.Ns = append(resp.Ns, dns.Copy(z.soa)) // NODATA: the name exists, the type does not
	}
}

// reservedDomains may not be dns.domain nor end it: the host resolves
// them itself (RFC 6761, RFC 6762), and routing one to meshd would take
// names from the host.
var reservedDomains = []string{"local", "localhost", "arpa", "invalid", "onion"}

// ValidDomain checks dns.domain: one or more DNS labels (a-z, 0-9, '-',
// 1-63 each, no final dot), at most 125 characters so that
// NAME.CLUSTER.DOMAIN fits in a DNS name whatever the two labels, and
// not one of the names the host resolves itself (local, localhost,
// arpa, invalid, onion) nor under one.
func ValidDomain(domain string) error {
	if domain == "" || len(domain) > 125 {
		return fmt.Errorf("dns domain %q: want 1-125 characters", domain)
	}
	for l := range strings.SplitSeq(domain, ".") {
		if !validLabel(l) {
			return fmt.Errorf("dns domain %q: each label 1-63 of a-z, 0-9, '-', starting and ending with a letter or digit", domain)
		}
	}
	labels := strings.Split(domain, ".")
	if slices.Contains(reservedDomains, labels[len(labels)-1]) {
		return errors.New("dns domain " + strconv.Quote(domain) + ": the host resolves " + labels[len(labels)-1] + " itself; choose another (default mesh)")
	}
	return nil
}

// validLabel is a node's or cluster's name rule (enroll.ValidName).
func validLabel(l string) bool { return enroll.ValidName(l) == nil }
