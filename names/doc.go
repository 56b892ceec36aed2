// Package names is the cluster's DNS (issue 30): every meshd answers
// NAME.CLUSTER.DOMAIN (dns.domain, default mesh) with the overlay IP of
// each active node, and the overlay's reverse zone with their names, from
// its own view of raft's records (a control node's FSM, a worker's
// fetched node list), so a node answers with every control node down.
//
// A dual-stack cluster (issue 34: NewZone given an IPv6 overlay prefix,
// /64 to /124) also gets an AAAA for each node with an IPv6 overlay
// address (ANY: the A and the AAAA) and its PTR in the ip6.arpa zone of
// that prefix rounded down to whole nibbles; an AAAA of a node without
// one is NODATA, and without an IPv6 prefix ip6.arpa is not claimed
// (REFUSED). TestZoneAnswer6, TestReverseZone6, TestNewZoneOverlay6,
// TestZoneLookupEqual6 and TestServerIPv6 check it.
//
// Zone is one view, immutable, rebuilt by the member runtime on every
// change of the records it follows; Server answers from the last one it
// was given, over UDP and TCP, on the listeners the runtime opens (the
// overlay address and a loopback address, never the underlay). The wire
// format, the TCP framing and the EDNS0 handling are
// github.com/miekg/dns's. What is not a plain query is counted and
// dropped; each source has a rate (persource); answers are capped at
// MaxAnswer bytes. Names outside the zones are REFUSED, never
// forwarded.
//
// Import rule (deps_test.go): may import enroll and persource; nothing else of meshd.
package names
