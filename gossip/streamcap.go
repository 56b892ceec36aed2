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
// maxStreamsPerSource from one source network (an IPv4 /24 or an IPv6
// /64, as the raft port counts); one past either is closed at once. A
// member uses a stream for a push/pull every 30 s (lan timers) or a TCP
// fallback probe, each over in milliseconds, so the bounds are far above
// what a cluster needs.
const (
	maxStreams          = 256
	maxStreamsPerSource = 16
)

// streamCap counts the streams being served.
type streamCap struct {
	mu    sync.Mutex
	open  int
	bySrc map[netip.Prefix]int
}

// admit wraps c so that its Close gives its slot back, or reports false
// when c is one past a bound (the caller closes it).
func (s *streamCap) admit(c net.Conn) (net.Conn, bool) {
	src := streamSource(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= maxStreams || s.bySrc[src] >= maxStreamsPerSource {
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

// streamSource is the network c's peer counts in.
func streamSource(c net.Conn) netip.Prefix {
	var a netip.Addr
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		a, _ = netip.AddrFromSlice(ta.IP)
		a = a.Unmap()
	}
	bits := 64
	if a.Is4() {
		bits = 24
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
