package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync"
)

// peerConn is an open raft connection whose peer passed Verify; the layer
// tracks it until it is closed.
type peerConn struct {
	*tls.Conn
	leaf    *x509.Certificate
	layer   *TLSStreamLayer
	untrack sync.Once
	closed  sync.Once
	// served: Accept handed it to raft, whose handler closes it when it
	// is done with it (TLSStreamLayer.served counts those not closed).
	served bool
}

// Close closes the connection and stops tracking it: its owner is done
// with it.
func (c *peerConn) Close() error {
	c.forget()
	c.closed.Do(func() {
		if c.served {
			c.layer.served.Done()
		}
	})
	return c.Conn.Close()
}

// forget stops tracking the connection.
func (c *peerConn) forget() {
	c.untrack.Do(func() {
		c.layer.mu.Lock()
		delete(c.layer.open, c)
		c.layer.mu.Unlock()
	})
}

// cut closes the connection under raft's feet: the raw socket, so a
// writer blocked on it does not hold the close up. Its owner still
// closes it once its read fails.
func (c *peerConn) cut() {
	_ = c.NetConn().Close()
	c.forget()
}

// admit checks tc's peer with Verify and tracks it; a refused connection
// is closed.
func (s *TLSStreamLayer) admit(tc *tls.Conn) (*peerConn, error) {
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		_ = tc.Close()
		return nil, errors.New("the peer presented no certificate")
	}
	pc := &peerConn{Conn: tc, leaf: cs.PeerCertificates[0], layer: s}
	s.mu.Lock()
	verify := s.verify
	s.mu.Unlock()
	if verify != nil {
		if err := verify(pc.leaf); err != nil {
			_ = tc.NetConn().Close()
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		_ = tc.NetConn().Close()
		return nil, ErrStreamClosed
	default:
	}
	s.open[pc] = struct{}{}
	return pc, nil
}

// SetVerify replaces the layer's check (the control plane supplies it
// once raft's state exists) and at once rechecks every open connection
// against it.
func (s *TLSStreamLayer) SetVerify(v Verify) int {
	s.mu.Lock()
	s.verify = v
	s.mu.Unlock()
	return s.Recheck()
}

// Recheck runs Verify again on every open connection's peer and closes
// those it now refuses (a removed node, a replaced leaf). It returns how
// many it closed.
func (s *TLSStreamLayer) Recheck() int {
	s.mu.Lock()
	verify := s.verify
	conns := make([]*peerConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if verify == nil {
		return 0
	}
	closed := 0
	for _, c := range conns {
		if verify(c.leaf) != nil {
			c.cut()
			closed++
		}
	}
	return closed
}

// OpenConns counts the tracked open connections (accepted and dialed).
func (s *TLSStreamLayer) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

var _ net.Conn = (*peerConn)(nil)
