package raftnode

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// handshakeSlots bounds the raft port's handshakes in progress: at most
// maxHandshakes from sources that are not raft's configured servers, at
// most maxHandshakesPerSource from one source network (an IPv4 /24 or an
// IPv6 /64: whoever holds one address of a network usually holds more),
// and for each configured server's own address maxHandshakesPerSource
// more that nobody else can take. Before issue 27 (item 8) the limit was
// per address: 8 addresses × 16 silent connections held all 128 slots and
// no control node's dial got through until they timed out.
type handshakeSlots struct {
	mu      sync.Mutex
	pending int                  // handshakes from sources that are not peers
	byNet   map[netip.Prefix]int // from each source network, peers excluded
	byPeer  map[netip.Addr]int   // from each configured server's address
	peers   func() []netip.Addr  // raft's configured servers (nil: none known)
	known   map[netip.Addr]bool  // peers() as last read
	read    time.Time            // when known was read
	now     func() time.Time
}

// peerRefresh is how often the configured servers are read again: a
// flood of connections must not become a flood of reads of raft's
// configuration.
const peerRefresh = time.Second

// slot says which budget a handshake took, for release.
type slot struct {
	peer netip.Addr   // valid: a configured server's reserved budget
	net  netip.Prefix // otherwise the source network's share of the pool
}

// sourceAddr is the connection's remote address, IPv4 unmapped.
func sourceAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// SourceNet is the network a source address counts in: its IPv4 /24 or
// IPv6 /64 (the control API's per-network bounds use it too:
// control/gates.go).
func SourceNet(a netip.Addr) netip.Prefix {
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits) // an invalid address gives the zero prefix: one shared bucket
	return p
}

// take reserves a slot for a handshake from a, or reports false.
func (h *handshakeSlots) take(a netip.Addr) (slot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.isPeer(a) && h.byPeer[a] < maxHandshakesPerSource {
		h.byPeer[a]++
		return slot{peer: a}, true
	}
	n := SourceNet(a)
	if h.pending >= maxHandshakes || h.byNet[n] >= maxHandshakesPerSource {
		return slot{}, false
	}
	h.pending++
	h.byNet[n]++
	return slot{net: n}, true
}

// give returns s.
func (h *handshakeSlots) give(s slot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.peer.IsValid() {
		if h.byPeer[s.peer]--; h.byPeer[s.peer] <= 0 {
			delete(h.byPeer, s.peer)
		}
		return
	}
	h.pending--
	if h.byNet[s.net]--; h.byNet[s.net] <= 0 {
		delete(h.byNet, s.net)
	}
}

// isPeer reports whether a is a configured server's address, reading
// them again at most once per peerRefresh. Called with mu held.
func (h *handshakeSlots) isPeer(a netip.Addr) bool {
	if h.peers == nil || !a.IsValid() {
		return false
	}
	if now := h.now(); h.known == nil || now.Sub(h.read) >= peerRefresh {
		h.known, h.read = map[netip.Addr]bool{}, now
		for _, p := range h.peers() {
			h.known[p.Unmap()] = true
		}
	}
	return h.known[a]
}
