package nebula

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// meshd patch 9 (PATCHES.md, "Remember when each host last reported"): a
// lighthouse keeps, for every host that sends it a host update, the time
// of the last one, in a list ordered oldest first. meshd's control nodes
// are the lighthouses, and every member sends each of them an update every
// lighthouse.interval, so the list says which members went silent without
// a packet of meshd's own: the first entries are the longest silent, and
// reading the silent ones costs what is silent, not what is known (meshd
// issue 54, docs/architecture.md "Gossip at 1,000 and 10,000 members").
// Upstream's LightHouse carries a TODO for the same thing (a timer wheel
// to kick out addresses that have not reported in a long time).

// HostHeard is when a lighthouse last took a host update from VpnAddr.
type HostHeard struct {
	VpnAddr netip.Addr
	At      time.Time
}

// hostsHeard is the ordered record. Its zero value is not usable; see
// newHostsHeard.
type hostsHeard struct {
	mu     sync.Mutex
	byAddr map[netip.Addr]*list.Element // of HostHeard
	order  *list.List                   // oldest At first
	now    func() time.Time
}

func newHostsHeard() *hostsHeard {
	return &hostsHeard{byAddr: map[netip.Addr]*list.Element{}, order: list.New(), now: time.Now}
}

// note records an update from addr now: O(1), the entry moves to the end.
func (h *hostsHeard) note(addr netip.Addr) {
	if h == nil {
		return
	}
	at := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.byAddr[addr]; ok {
		e.Value = HostHeard{VpnAddr: addr, At: at}
		h.order.MoveToBack(e)
		return
	}
	h.byAddr[addr] = h.order.PushBack(HostHeard{VpnAddr: addr, At: at})
}

// get is when addr last reported, if it did.
func (h *hostsHeard) get(addr netip.Addr) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.byAddr[addr]
	if !ok {
		return time.Time{}, false
	}
	return e.Value.(HostHeard).At, true
}

// oldest returns up to n entries, oldest first, that last reported before
// cutoff (all of them when cutoff is zero): O(what it returns).
func (h *hostsHeard) oldest(cutoff time.Time, n int) []HostHeard {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HostHeard
	for e := h.order.Front(); e != nil && len(out) < n; e = e.Next() {
		v := e.Value.(HostHeard)
		if !cutoff.IsZero() && !v.At.Before(cutoff) {
			break
		}
		out = append(out, v)
	}
	return out
}

// forget drops addr (a host that left the cluster).
func (h *hostsHeard) forget(addr netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.byAddr[addr]; ok {
		h.order.Remove(e)
		delete(h.byAddr, addr)
	}
}

// count is how many hosts are on record.
func (h *hostsHeard) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byAddr)
}

// LighthouseHeard says when this lighthouse last took a host update from
// vpnAddr (meshd patch 9); false when it never did, or is no lighthouse.
func (c *Control) LighthouseHeard(vpnAddr netip.Addr) (time.Time, bool) {
	return c.f.lightHouse.heard.get(vpnAddr)
}

// LighthouseSilent returns up to n hosts, longest silent first, whose
// last host update came before cutoff (meshd patch 9), and how many hosts
// this lighthouse has heard from in all. Its cost is what it returns.
func (c *Control) LighthouseSilent(cutoff time.Time, n int) (silent []HostHeard, heard int) {
	h := c.f.lightHouse.heard
	return h.oldest(cutoff, n), h.count()
}

// LighthouseForget drops vpnAddr from the record of hosts heard (meshd
// patch 9): a host that left is no longer silent, it is gone.
func (c *Control) LighthouseForget(vpnAddr netip.Addr) {
	c.f.lightHouse.heard.forget(vpnAddr)
}
