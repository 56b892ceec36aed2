package gossip

import (
	"net"
	"net/netip"
	"sync"
)

// memberlist serves each TCP connection on port 7946 on a goroutine of
// its own until the peer is done or memberlist's TCP timeout passes;
// nothing bounded how many it served at once, so anyone who can reach the
// port could hold thousands of silent connections (issue 27). The
// transport now admits at most maxStreams at once, and at most
// maxStreamsPerSource from one source; one past either is closed at once.
// A member uses a stream for a push/pull every 30 s (lan timers), a join
// or a TCP fallback probe, each over in milliseconds.
//
// A source is one address inside the overlay gossip rides (Config.Overlay:
// Nebula lets a packet in only from the address its sender's certificate
// holds, so each is one member), and an IPv4 /24 or IPv6 /64 outside it
// (as the raft port counts). Until issue 54 every source was a /24, and
// gossip rides the overlay, whose addresses are given out in order, so
// the first 254 members of a cluster counted as one source: a control
// node, the seed of every join, closed the 17th stream from them at once
// (found by reading, while looking for why joins were refused in a
// formation of 100 agents on a loaded box, where each stream lasts
// longer; BenchmarkGossipSim's members take random addresses across a /16
// and never met the bound: 0 refused at 250 lan members).
const (
	maxStreams          = 256
	maxStreamsPerSource = 16
)

// streamCap counts the streams being served.
type streamCap struct {
	overlay netip.Prefix // Config.Overlay: inside it a source is one address

	mu      sync.Mutex
	refused int // streams closed at a bound, in all
	open    int
	bySrc   map[netip.Prefix]int
}

// admit wraps c so that its Close gives its slot back, or reports false
// when c is one past a bound (the caller closes it).
func (s *streamCap) admit(c net.Conn) (net.Conn, bool) {
	src := streamSource(c, s.overlay)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= maxStreams || s.bySrc[src] >= maxStreamsPerSource {
		s.refused++
		return nil, false
	}
	if s.bySrc == nil {
		s.bySrc = map[netip.Prefix]int{}
	}
	s.open++
	s.bySrc[src]++
	return &cappedConn{Conn: c, release: func() { s.release(src) }}, true
}

func (s *streamCap) release(src netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.bySrc[src]--; s.bySrc[src] <= 0 {
		delete(s.bySrc, src)
	}
}

// refusedCount is how many streams were closed at a bound.
func (s *streamCap) refusedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// StreamsRefused is how many TCP streams to this member's gossip port were
// closed at once because their source, or the member, had the most it
// serves at once (streamcap.go): a count that grows says a source holds
// connections open, or a cluster pushes and pulls faster than this member
// serves.
func (g *Gossip) StreamsRefused() int { return g.tr.served.refusedCount() }

// streamSource is the source c's peer counts in: its address inside
// overlay, its /24 or /64 outside it.
func streamSource(c net.Conn, overlay netip.Prefix) netip.Prefix {
	var a netip.Addr
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		a, _ = netip.AddrFromSlice(ta.IP)
		a = a.Unmap()
	}
	bits := 64
	if a.Is4() {
		bits = 24
	}
	if overlay.IsValid() && overlay.Contains(a) {
		bits = a.BitLen()
	}
	p, _ := a.Prefix(bits)
	return p
}

// cappedConn gives its slot back on its first Close.
type cappedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
