package control

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
)

// connSet tracks port 7300's open connections (http.Server.ConnState), so
// the ones whose peer stops being a member can be closed when node
// records change, instead of living on as kept-alive connections.
type connSet struct {
	mu sync.Mutex
	// conns maps each open connection to whether it has served a request
	// (its handshake is then complete).
	conns map[net.Conn]bool
}

func newConnSet() *connSet { return &connSet{conns: map[net.Conn]bool{}} }

// track is the http.Server's ConnState hook.
func (s *connSet) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = false
	case http.StateActive, http.StateIdle:
		s.conns[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// recheck closes every connection that has served a request and whose
// peer's leaf judge now refuses; it returns how many. A connection still
// in its handshake is left alone (its first request meets the guard), as
// is one without a client certificate (the enroll API's).
func (s *connSet) recheck(judge func(*x509.Certificate) error) int {
	s.mu.Lock()
	var ready []*tls.Conn
	for c, served := range s.conns {
		if tc, ok := c.(*tls.Conn); ok && served {
			ready = append(ready, tc)
		}
	}
	s.mu.Unlock()
	closed := 0
	for _, tc := range ready {
		cs := tc.ConnectionState()
		if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
			continue
		}
		if judge(cs.PeerCertificates[0]) != nil {
			// The socket under TLS: a handler writing on the connection
			// does not hold the close up.
			_ = tc.NetConn().Close()
			closed++
		}
	}
	return closed
}

// len counts the tracked connections.
func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
