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
	mu    sync.Mutex
	conns map[net.Conn]*connInfo
}

type connInfo struct {
	state http.ConnState
	// doomed: its peer stopped being a member while it served a request
	// (the one that caused the change, such as a node's own leave); it is
	// closed once that answer is written.
	doomed bool
}

func newConnSet() *connSet { return &connSet{conns: map[net.Conn]*connInfo{}} }

// track is the http.Server's ConnState hook.
func (s *connSet) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = &connInfo{state: st}
	case http.StateActive, http.StateIdle:
		ci := s.conns[c]
		if ci == nil {
			ci = &connInfo{}
			s.conns[c] = ci
		}
		ci.state = st
		if st == http.StateIdle && ci.doomed {
			cut(c)
		}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// recheck closes every idle connection whose peer's leaf judge now
// refuses, and dooms every such connection serving a request (closed as
// soon as it is idle); it returns how many it closed or doomed. A
// connection that has not served a request yet is left alone (its first
// request meets the guard), as is one without a client certificate (the
// enroll API's).
func (s *connSet) recheck(judge func(*x509.Certificate) error) int {
	type entry struct {
		c  net.Conn
		tc *tls.Conn
	}
	s.mu.Lock()
	var served []entry
	for c, ci := range s.conns {
		if tc, ok := c.(*tls.Conn); ok && ci.state != http.StateNew {
			served = append(served, entry{c, tc})
		}
	}
	s.mu.Unlock()
	n := 0
	for _, e := range served {
		cs := e.tc.ConnectionState()
		if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 || judge(cs.PeerCertificates[0]) == nil {
			continue
		}
		n++
		s.mu.Lock()
		if ci, ok := s.conns[e.c]; ok {
			if ci.state == http.StateIdle {
				cut(e.c)
			} else {
				ci.doomed = true
			}
		}
		s.mu.Unlock()
	}
	return n
}

// cut closes the socket under TLS, so nothing waits on a TLS alert.
func cut(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		_ = tc.NetConn().Close()
		return
	}
	_ = c.Close()
}

// cutNew closes every connection that has not begun a request: a
// stopping server's shutdown counts such a connection busy for up to
// 5 s (net/http: a client's spare connection that never sends one held
// a control node's stop 0.5 s and more). Its client meets a closed
// connection and asks another control node.
func (s *connSet) cutNew() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, ci := range s.conns {
		if ci.state == http.StateNew {
			cut(c)
		}
	}
}
