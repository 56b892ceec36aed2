package mesh

import (
	"net/netip"
	"reflect"
	"slices"
)

// delta is what a membership change changed between the applied config
// and the next one: the keys Nebula patch 5 applies without a reload
// (static_host_map, lighthouse.hosts, relay.relays, pki.blocklist), and the
// peers meshd tracks without telling Nebula (Roaming). Reload applies a
// delta when nothing else changed (applyDelta, reloaddelta.go); anything
// else takes the full reload.
type delta struct {
	// static are the static_host_map entries (as staticHostMap merges
	// them) that changed: the new underlay addresses, none for an entry
	// removed.
	static map[netip.Addr][]netip.AddrPort
	// hosts are the Config.StaticHosts entries that changed, as the new
	// config has them: nil for one removed.
	hosts map[netip.Addr][]netip.AddrPort
	// lighthouses, relays and roaming say that these lists changed; the
	// new ones are the next config's.
	lighthouses, relays, roaming bool
	// block and unblock are the fingerprints the blocklist gained and
	// lost.
	block, unblock []string
}

// empty reports whether d changes nothing.
func (d delta) empty() bool {
	return len(d.hosts) == 0 && len(d.static) == 0 && !d.lighthouses && !d.relays && !d.roaming &&
		len(d.block) == 0 && len(d.unblock) == 0
}

// diffConfig compares next (as the caller hands it, entries for self
// included) with old (applied, without them). It returns false when a
// field other than the delta's changed: the caller reloads in full.
//
// The cost is a map lookup and a slice comparison per static host, and no
// allocation for an unchanged one: the caller hands a whole Config, so
// its static hosts are read once; nothing is rendered, sorted or copied
// for them.
func diffConfig(old, next Config, self netip.Addr) (delta, bool) {
	if !sameOutsideDelta(old, next) {
		return delta{}, false
	}
	var d delta
	matched := 0
	for ip, addrs := range next.StaticHosts {
		if ip == self {
			continue
		}
		was, ok := old.StaticHosts[ip]
		if ok {
			matched++
		}
		if !ok || !slices.Equal(was, addrs) {
			d.setHost(ip, addrs)
		}
	}
	if matched < len(old.StaticHosts) { // some were removed
		for ip := range old.StaticHosts {
			if _, ok := next.StaticHosts[ip]; !ok {
				d.setHost(ip, nil)
			}
		}
	}
	d.complete(old, next, self)
	if !slices.Equal(old.Blocklist, next.Blocklist) {
		d.block, d.unblock = setDiff(old.Blocklist, next.Blocklist)
	}
	return d, true
}

// complete adds to d, whose hosts are set, what changed in the lists
// from old to next (lighthouses, relays, roaming peers), and the
// static_host_map entries that changed with d.hosts and the lighthouses.
// next's static hosts are old's with d.hosts applied.
func (d *delta) complete(old, next Config, self netip.Addr) {
	touched := make([]netip.Addr, 0, len(d.hosts))
	for ip := range d.hosts {
		touched = append(touched, ip)
	}
	nextLHs := lighthousesWithout(next.Lighthouses, self)
	if !slices.EqualFunc(old.Lighthouses, nextLHs, sameLighthouse) {
		d.lighthouses = true
		for _, lh := range slices.Concat(old.Lighthouses, nextLHs) {
			touched = append(touched, lh.OverlayIP)
		}
	}
	for _, ip := range touched {
		host, ok := d.hosts[ip]
		if !ok {
			host = old.StaticHosts[ip]
		}
		was, now := staticEntry(old.Lighthouses, old.StaticHosts[ip], ip), staticEntry(nextLHs, host, ip)
		if !slices.Equal(was, now) {
			if d.static == nil {
				d.static = map[netip.Addr][]netip.AddrPort{}
			}
			d.static[ip] = now
		}
	}
	d.relays = !slices.Equal(relays(old), relays(withoutSelfRelays(next, self)))
	d.roaming = !slices.Equal(old.Roaming, next.Roaming)
}

func (d *delta) setHost(ip netip.Addr, addrs []netip.AddrPort) {
	if d.hosts == nil {
		d.hosts = map[netip.Addr][]netip.AddrPort{}
	}
	d.hosts[ip] = addrs
}

// sameOutsideDelta reports whether a and b are equal in every field but
// the delta's. A field added to Config later is compared here without a
// word: it takes the full reload until someone makes it part of a delta.
func sameOutsideDelta(a, b Config) bool {
	a.StaticHosts, a.Lighthouses, a.Relays, a.Roaming, a.Blocklist = nil, nil, nil, nil, nil
	b.StaticHosts, b.Lighthouses, b.Relays, b.Roaming, b.Blocklist = nil, nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// staticEntry is the static_host_map entry of ip as staticHostMap builds
// it from the lighthouses lhs and ip's static host entry host: the
// lighthouse's underlay and the static host's, unmapped, sorted, once
// each; nil when neither has one.
func staticEntry(lhs []Lighthouse, host []netip.AddrPort, ip netip.Addr) []netip.AddrPort {
	var out []netip.AddrPort
	for _, lh := range lhs {
		if lh.OverlayIP == ip {
			out = append(out, lh.Underlay...)
		}
	}
	out = append(out, host...)
	for i, a := range out {
		out[i] = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return slices.Compact(out)
}

func sameLighthouse(a, b Lighthouse) bool {
	return a.OverlayIP == b.OverlayIP && slices.Equal(a.Underlay, b.Underlay)
}

// lighthousesWithout is lhs without self, as withoutSelf drops it; lhs
// itself when it does not hold self.
func lighthousesWithout(lhs []Lighthouse, self netip.Addr) []Lighthouse {
	if !slices.ContainsFunc(lhs, func(lh Lighthouse) bool { return lh.OverlayIP == self }) {
		return lhs
	}
	return slices.DeleteFunc(slices.Clone(lhs), func(lh Lighthouse) bool { return lh.OverlayIP == self })
}

// withoutSelfRelays is c with self dropped from its relays only.
func withoutSelfRelays(c Config, self netip.Addr) Config {
	c.Relays = slices.DeleteFunc(slices.Clone(c.Relays), func(r netip.Addr) bool { return r == self })
	return c
}

// setDiff returns what next holds and old does not, and the reverse, each
// once and sorted.
func setDiff(old, next []string) (added, removed []string) {
	in := func(list []string) map[string]bool {
		s := make(map[string]bool, len(list))
		for _, v := range list {
			s[v] = true
		}
		return s
	}
	o, n := in(old), in(next)
	for v := range n {
		if !o[v] {
			added = append(added, v)
		}
	}
	for v := range o {
		if !n[v] {
			removed = append(removed, v)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}
