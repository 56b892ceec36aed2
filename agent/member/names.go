package member

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/names"
)

// The cluster's names (issue 30, package names). Every member answers
// NAME.CLUSTER.DOMAIN from its own view of the records (clusterFacts: a
// control node's raft, a worker's fetched node list, so it answers with
// every control node down) on its overlay address and on dns.loopback,
// never on the underlay. The overlay loop hands the server a new zone
// whenever the active records' names or overlay addresses changed
// (syncZone, at the start of every pass: before the pass's reload, so a
// removal's acknowledgement, which waits for the reload, comes after the
// name is gone). A pass reads only the records changed since the last
// (fetched.RecordsSince); a change of names builds the zone again, O(records). With
// systemd-resolved running, the overlay's link routes ~CLUSTER.DOMAIN
// to the overlay address (resolved.go).

// dnsNames is this node's DNS.
type dnsNames struct {
	*node
	srv *names.Server

	mu        sync.Mutex
	hosts     []names.Host      // the zone's, sorted; guarded by mu
	overlay6  netip.Prefix      // the zone's IPv6 overlay; guarded by mu
	notServed map[string]string // address -> why it is not served; guarded by mu
	// resolved is systemd-resolved's routing of the domain as last
	// seen (apitype.DNS.Resolved), link the overlay's link name;
	// guarded by mu (resolved.go).
	resolved, link string
	resolvedErr    error // resolved refused: status warns ResolvedNotUsed
	// recVer is the node list's version the zone's hosts are
	// (fetched.RecordDelta), byID those hosts by record id: a pass reads
	// only the records changed since, and builds a zone only when a
	// name or overlay address changed; guarded by mu.
	recVer uint64
	byID   map[string]names.Host
	// firstZone wakes the resolved upkeep when the first zone is set (a
	// worker's first node list): resolved is told the domain at once.
	firstZone chan struct{}
}

// startNames serves the names on the overlay address (through Nebula's
// userspace stack in userspace mode) and on dns.loopback. An address
// that cannot be bound is reported (status, DNSNotServed) and the rest of
// meshd runs: a host's other DNS server on port 53 must not keep a node
// out of its cluster.
func (rt *Runtime) startNames() {
	if !rt.cfg.DNS.Enabled {
		return
	}
	d := &dnsNames{node: rt.node, notServed: map[string]string{}, resolved: resolvedOff, firstZone: make(chan struct{}, 1),
		srv: names.NewServer(names.Limits{}, rt.log.With("component", "dns"), rt.now)}
	rt.dns = d
	d.syncZone()
	port := strconv.Itoa(rt.cfg.DNS.Port)
	overlay := net.JoinHostPort(rt.overlayAddr().String(), port)
	if rt.ov.meshBase.Userspace {
		d.serve(overlay, rt.mesh.ListenPacket, rt.mesh.Listen)
	} else {
		d.serve(overlay, net.ListenPacket, net.Listen)
	}
	d.serve(rt.cfg.DNSLoopback().String(), net.ListenPacket, net.Listen)
}

// serve binds addr for UDP and TCP and hands both to the server, or
// records why not.
func (d *dnsNames) serve(addr string, listenPacket func(network, addr string) (net.PacketConn, error),
	listen func(network, addr string) (net.Listener, error)) {
	pc, err := listenPacket("udp", addr)
	if err != nil {
		d.refused(addr, err)
		return
	}
	ln, err := listen("tcp", addr)
	if err != nil {
		_ = pc.Close()
		d.refused(addr, err)
		return
	}
	if err := d.srv.Serve(pc, ln); err != nil {
		d.refused(addr, err)
	}
}

func (d *dnsNames) refused(addr string, err error) {
	d.log.Warn("names not served on an address", "addr", addr, "code", codes.DNSNotServed, "err", err)
	d.mu.Lock()
	d.notServed[addr] = err.Error()
	d.mu.Unlock()
}

// syncZone gives the server a new zone when the active records' names
// or addresses changed since the last one (a worker before its first
// node list keeps the zone it has).
func (d *dnsNames) syncZone() {
	if d == nil {
		return
	}
	if d.removed() { // the cluster no longer knows this node: no names (standing.go)
		d.mu.Lock()
		d.srv.SetZone(nil)
		d.hosts = nil
		d.mu.Unlock()
		return
	}
	overlay6 := d.ownOverlay6()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.srv.Zone() == nil {
		d.recVer = 0 // none yet, or emptied by a removal: every record
	}
	ch := d.cluster.RecordsSince(d.recVer)
	if !ch.Known {
		return
	}
	d.recVer = ch.Version
	if !d.hostsChanged(ch) && d.srv.Zone() != nil && overlay6 == d.overlay6 {
		return // no name or overlay address changed: O(records changed)
	}
	hosts := sortedHosts(d.byID)
	if d.srv.Zone() != nil && slices.Equal(hosts, d.hosts) && overlay6 == d.overlay6 {
		return
	}
	z, err := names.NewZone(d.facts.ClusterName, d.cfg.DNS.Domain, d.facts.Overlay.Masked(), overlay6, hosts)
	if err != nil { // the config and the facts were checked at start: a bug
		d.log.Error("dns zone not built", "err", err)
		return
	}
	if d.srv.Zone() == nil {
		select { // buffered 1: sent once, and again after a removal's empty zone (standing.go)
		case d.firstZone <- struct{}{}:
		default:
		}
	}
	d.srv.SetZone(z)
	d.hosts, d.overlay6 = hosts, overlay6
	d.log.Debug("dns zone", "origin", z.Origin(), "names", z.Len())
}

// hostsChanged brings d.byID in line with the records ch hands (d.mu
// held) and reports whether a host (a name or an overlay address) changed.
func (d *dnsNames) hostsChanged(ch fetched.RecordDelta) bool {
	if ch.Whole || d.byID == nil {
		d.byID = map[string]names.Host{}
		for _, n := range ch.All {
			if h, ok := zoneHost(n); ok {
				d.byID[n.ID] = h
			}
		}
		return true
	}
	changed := false
	for _, n := range ch.Put {
		h, ok := zoneHost(n)
		old, had := d.byID[n.ID]
		switch {
		case ok && (!had || old != h):
			d.byID[n.ID], changed = h, true
		case !ok && had:
			delete(d.byID, n.ID)
			changed = true
		}
	}
	for _, id := range ch.Del {
		if _, had := d.byID[id]; had {
			delete(d.byID, id)
			changed = true
		}
	}
	return changed
}

// zoneHost is n's name and overlay addresses, if it is active with a
// valid overlay address: removed, left and failed nodes have no name.
func zoneHost(n control.NodeRecord) (names.Host, bool) {
	a, err := netip.ParseAddr(n.OverlayIP)
	if err != nil || !n.Active() {
		return names.Host{}, false
	}
	h := names.Host{Name: n.Name, Addr: a.Unmap()}
	if a6, err := netip.ParseAddr(n.OverlayIP6); err == nil {
		h.Addr6 = a6
	}
	return h, true
}

// sortedHosts are the zone's hosts sorted by name, then address.
func sortedHosts(byID map[string]names.Host) []names.Host {
	hosts := make([]names.Host, 0, len(byID))
	for _, h := range byID {
		hosts = append(hosts, h)
	}
	slices.SortFunc(hosts, func(a, b names.Host) int { return cmp.Or(strings.Compare(a.Name, b.Name), a.Addr.Compare(b.Addr)) })
	return hosts
}

// resolved's states in status besides why not (resolved.go).
const (
	resolvedOff        = "off" // dns.resolved false, or userspace mode (no link of the host's)
	resolvedConfigured = "configured"
)

// stop closes the listeners.
func (d *dnsNames) stop() {
	if d != nil {
		d.srv.Close()
	}
}

// fqdn is node's DNS name on this node ("" without names).
func (d *dnsNames) fqdn(node string) string {
	if d == nil {
		return ""
	}
	if z := d.srv.Zone(); z != nil {
		return z.FQDN(node)
	}
	return ""
}

// NodeName is the node a command names as arg: a name in this node's
// zone (w1.prod.mesh) is the node's name (w1); anything else is arg.
func (rt *Runtime) NodeName(arg string) string {
	if rt.dns == nil {
		return arg
	}
	if z := rt.dns.srv.Zone(); z != nil {
		return z.NodeName(arg)
	}
	return arg
}

// status is `meshctl status`' DNS block and its warnings.
func (d *dnsNames) status() (*apitype.DNS, []apitype.Warning) {
	if d == nil {
		return nil, nil
	}
	s := &apitype.DNS{Listening: d.srv.Addrs(), Loopback: d.cfg.DNSLoopback().String()}
	if z := d.srv.Zone(); z != nil {
		s.Domain, s.Names = z.Origin(), z.Len()
	}
	var warns []apitype.Warning
	d.mu.Lock()
	s.Resolved, s.Link = d.resolved, d.link
	if d.resolvedErr != nil {
		warns = append(warns, apitype.Warning{Code: codes.ResolvedNotUsed, Detail: d.resolvedErr.Error()})
	}
	if s.Resolved != resolvedConfigured && s.Domain != "" {
		lo, err := netip.ParseAddrPort(s.Loopback)
		if err == nil {
			s.Hint = fmt.Sprintf("systemd-resolved does not route %s here: point a resolver at %s for that domain only, "+
				"e.g. dnsmasq's server=/%s/%s#%d; meshd never rewrites /etc/resolv.conf", s.Domain, s.Loopback, s.Domain, lo.Addr(), lo.Port())
		}
	}
	for addr, why := range d.notServed {
		s.NotServed = append(s.NotServed, addr+": "+why)
		warns = append(warns, apitype.Warning{Code: codes.DNSNotServed, Detail: fmt.Sprintf("names not served on %s: %s", addr, why)})
	}
	d.mu.Unlock()
	slices.Sort(s.NotServed)
	slices.SortFunc(warns, func(a, b apitype.Warning) int { return strings.Compare(a.Detail, b.Detail) })
	return s, warns
}
