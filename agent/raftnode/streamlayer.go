package raftnode

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// TLSStreamLayer carries raft over mutual TLS: both ends present
// role=control leaves of this cluster's CA (pki.ServerTLSConfig and
// pki.ClientTLSConfig enforce it at the handshake).
type TLSStreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	client    *tls.Config
}

var _ raft.StreamLayer = (*TLSStreamLayer)(nil)

// NewTLSStreamLayer listens on bind with server and dials with client;
// advertise is the address other servers reach this one at.
func NewTLSStreamLayer(bind string, advertise net.Addr, server, client *tls.Config) (*TLSStreamLayer, error) {
	ln, err := tls.Listen("tcp", bind, server)
	if err != nil {
		return nil, err
	}
	return &TLSStreamLayer{ln: ln, advertise: advertise, client: client}, nil
}

// Accept returns the next connection after its handshake has succeeded, so
// a peer without a control leaf never reaches raft.
func (s *TLSStreamLayer) Accept() (net.Conn, error) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return nil, err
		}
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			_ = tc.Close()
			continue
		}
		_ = tc.SetDeadline(time.Time{})
		return tc, nil
	}
}

func (s *TLSStreamLayer) Close() error   { return s.ln.Close() }
func (s *TLSStreamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a raft peer and completes the handshake before raft
// writes a byte.
func (s *TLSStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(addr), s.client)
}
