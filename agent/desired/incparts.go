package desired

import (
	"net/netip"
	"slices"

	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// part is what one record contributes to Compute's overlay, as Compute
// reads its Peer: static host entries (its IPv4 overlay address, and its
// IPv6 one inside this node's IPv6 network), a lighthouse, a relay, and
// roaming addresses (a stock Nebula member with no underlay on record).
type part struct {
	counts     bool // a peer: not this node's name, not gone
	name       string
	overlay    netip.Addr
	underlay   netip.AddrPort
	hosts      [2]netip.Addr // invalid where none
	roam       [2]netip.Addr // invalid where none
	lighthouse bool
	relay      bool
}

func (p part) equal(q part) bool { return p == q }

// contribution is r's part when counts (else none).
func (t *Tracker) contribution(r Record, counts bool) part {
	if !counts {
		return part{}
	}
	p := part{counts: true, name: r.Name, overlay: r.Overlay, underlay: r.Underlay}
	if r.Overlay.IsValid() && !r.Underlay.IsValid() && r.Role == pki.RoleNebula {
		p.roam[0] = r.Overlay
		if r.Overlay6.IsValid() {
			p.roam[1] = r.Overlay6
		}
	}
	if !r.Overlay.IsValid() || !r.Underlay.IsValid() {
		p.underlay = netip.AddrPort{}
		return p
	}
	if t.self.ov6.Contains(r.Overlay6) {
		p.hosts[1] = r.Overlay6
	}
	if r.Role == pki.RoleControl {
		p.lighthouse, p.relay = true, true
		return p
	}
	p.hosts[0], p.relay = r.Overlay, r.Relay
	return p
}

// addrs are the overlay addresses p claims (one owner each).
func (p part) addrs() []netip.Addr {
	var out []netip.Addr
	for _, a := range [...]netip.Addr{p.overlay, p.hosts[1], p.roam[1]} {
		if a.IsValid() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// change is what one Update did to the static host map (each entry it
// touched, with what it held before) and which lists it changed.
type change struct {
	hosts                        map[netip.Addr]hostWas
	lighthouses, relays, roaming bool
}

type hostWas struct {
	addrs []netip.AddrPort
	had   bool
}

// setHost sets (or with no addrs removes) a static host entry.
func (t *Tracker) setHost(ip netip.Addr, addrs []netip.AddrPort, ch *change) {
	if ch.hosts == nil {
		ch.hosts = map[netip.Addr]hostWas{}
	}
	old, had := t.host[ip]
	if _, ok := ch.hosts[ip]; !ok {
		ch.hosts[ip] = hostWas{old, had}
	}
	for _, a := range old {
		t.paths = dropPath(t.paths, a.Addr())
	}
	if addrs == nil {
		delete(t.host, ip)
		return
	}
	t.host[ip] = addrs
	for _, a := range addrs {
		t.paths = addPath(t.paths, a.Addr())
	}
}

// drop takes the contribution p of the record id out.
func (t *Tracker) drop(id string, p part, ch *change) {
	if !p.counts {
		return
	}
	if t.names[p.name] == id {
		delete(t.names, p.name)
	}
	for _, a := range p.addrs() {
		if t.owner[a] == id {
			delete(t.owner, a)
		}
	}
	for _, h := range p.hosts {
		if h.IsValid() {
			t.setHost(h, nil, ch)
		}
	}
	if p.lighthouse {
		i, ok := slices.BinarySearchFunc(t.lighthouses, p.overlay, func(l mesh.Lighthouse, a netip.Addr) int { return l.OverlayIP.Compare(a) })
		if ok {
			t.lighthouses = slices.Delete(slices.Clone(t.lighthouses), i, i+1)
			t.paths = dropPath(t.paths, p.underlay.Addr())
			ch.lighthouses = true
		}
	}
	if p.relay {
		t.relays, ch.relays = dropSorted(t.relays, p.overlay), true
	}
	for _, a := range p.roam {
		if a.IsValid() {
			t.roaming, ch.roaming = dropSorted(t.roaming, a), true
		}
	}
}

// put gives e the contribution p; false on a tangle (an address or name
// another record holds).
func (t *Tracker) put(e *tracked, p part, ch *change) bool {
	e.part = p
	if !p.counts {
		return true
	}
	id := e.rec.ID
	if o, ok := t.names[p.name]; ok && o != id {
		return false
	}
	for _, a := range p.addrs() {
		if o, ok := t.owner[a]; ok && o != id {
			return false
		}
	}
	t.names[p.name] = id
	for _, a := range p.addrs() {
		t.owner[a] = id
	}
	for _, h := range p.hosts {
		if h.IsValid() {
			t.setHost(h, []netip.AddrPort{p.underlay}, ch)
		}
	}
	if p.lighthouse {
		l := mesh.Lighthouse{OverlayIP: p.overlay, Underlay: []netip.AddrPort{p.underlay}}
		i, _ := slices.BinarySearchFunc(t.lighthouses, p.overlay, func(l mesh.Lighthouse, a netip.Addr) int { return l.OverlayIP.Compare(a) })
		t.lighthouses = slices.Insert(slices.Clip(t.lighthouses), i, l)
		t.paths = addPath(t.paths, p.underlay.Addr())
		ch.lighthouses = true
	}
	if p.relay {
		t.relays, ch.relays = addSorted(t.relays, p.overlay), true
	}
	for _, a := range p.roam {
		if a.IsValid() {
			t.roaming, ch.roaming = addSorted(t.roaming, a), true
		}
	}
	return true
}

// mesh is ch as mesh.Apply takes it: the entries whose value changed,
// and each changed list whole (empty, not nil, when it emptied).
func (ch change) mesh(t *Tracker) mesh.Change {
	var out mesh.Change
	for ip, w := range ch.hosts {
		now, has := t.host[ip]
		if has == w.had && slices.Equal(now, w.addrs) {
			continue
		}
		if out.StaticHosts == nil {
			out.StaticHosts = map[netip.Addr][]netip.AddrPort{}
		}
		out.StaticHosts[ip] = now // nil: removed
	}
	if ch.lighthouses {
		out.Lighthouses = append([]mesh.Lighthouse{}, t.lighthouses...)
	}
	if ch.relays && !t.self.noNAT {
		out.Relays = append([]netip.Addr{}, t.relays...)
	}
	if ch.roaming {
		out.Roaming = append([]netip.Addr{}, t.roaming...)
	}
	return out
}

// addSorted is l with a inserted in order, dropSorted l with one a
// taken out: new slices, so a list handed out earlier stays as it was.
func addSorted(l []netip.Addr, a netip.Addr) []netip.Addr {
	i, _ := slices.BinarySearchFunc(l, a, netip.Addr.Compare)
	return slices.Insert(slices.Clip(l), i, a)
}

func dropSorted(l []netip.Addr, a netip.Addr) []netip.Addr {
	i, ok := slices.BinarySearchFunc(l, a, netip.Addr.Compare)
	if !ok {
		return l
	}
	return slices.Delete(slices.Clone(l), i, i+1)
}

// addPath and dropPath keep the sorted IPv4 underlay paths (Routes) in
// place: the slice is the tracker's own.
func addPath(paths []netip.Addr, a netip.Addr) []netip.Addr {
	if a = a.Unmap(); !a.Is4() {
		return paths
	}
	i, _ := slices.BinarySearchFunc(paths, a, netip.Addr.Compare)
	return slices.Insert(paths, i, a)
}

func dropPath(paths []netip.Addr, a netip.Addr) []netip.Addr {
	if a = a.Unmap(); !a.Is4() {
		return paths
	}
	i, ok := slices.BinarySearchFunc(paths, a, netip.Addr.Compare)
	if !ok {
		return paths
	}
	return slices.Delete(paths, i, i+1)
}

// relayList is the relays as Compute lists them: none when this node
// has no NAT in front of it.
func (t *Tracker) relayList() []netip.Addr {
	if t.self.noNAT {
		return nil
	}
	return computeList(t.relays)
}

// computeList is a copy of l as Compute builds it: nil when empty.
func computeList[T any](l []T) []T {
	if len(l) == 0 {
		return nil
	}
	return slices.Clone(l)
}
