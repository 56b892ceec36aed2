package control

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// ServerCheck judges a control node's TLS leaf after the CA and role
// checks passed; an error refuses the connection.
type ServerCheck func(leaf *x509.Certificate) error

// CheckServers adds check to every later connection this client makes
// (nil removes it) and closes the kept-alive ones, so nothing opened under
// the old check is reused. A worker sets it from its node list: the leaf
// must be the current (or previous) TLS leaf of an active control record.
func (c *Client) CheckServers(check ServerCheck) {
	if check == nil {
		c.check.Store(nil)
	} else {
		c.check.Store(&check)
	}
	c.http.CloseIdleConnections()
}

// verifyWith chains the client's ServerCheck after base, the CA and role
// check of pki.ClientTLSConfig.
func (c *Client) verifyWith(base func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if err := base(cs); err != nil {
			return err
		}
		check := c.check.Load()
		if check == nil {
			return nil
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server presented no certificate")
		}
		return (*check)(cs.PeerCertificates[0])
	}
}
