package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
)

// ServerTLSConfig is the TLS configuration of a listener that serves with
// id's chain (leaf, CA). With clientRoles, a client must present a leaf
// issued by id's CA whose role is one of clientRoles; otherwise the
// handshake fails with an error wrapping codes.PeerRoleDenied. Without
// clientRoles a client certificate is optional, but verified against id's
// CA when given.
//
// Certificate validity is judged at the config's Time (time.Now if nil).
func ServerTLSConfig(id *Identity, clientRoles ...Role) (*tls.Config, error) {
	tc, err := id.TLSCertificate()
	if err != nil {
		return nil, fmt.Errorf("server TLS config: %w", err)
	}
	pool, err := id.CAPool()
	if err != nil {
		return nil, fmt.Errorf("server TLS config: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{tc},
		ClientCAs:    pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
	if len(clientRoles) == 0 {
		return cfg, nil
	}
	roles := slices.Clone(clientRoles)
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		// crypto/tls has verified the chain against ClientCAs by now.
		if len(cs.PeerCertificates) == 0 {
			return codes.Wrap(codes.PeerRoleDenied, errors.New("the client presented no certificate"))
		}
		return checkPeerRole(cs.PeerCertificates[0], roles)
	}
	return cfg, nil
}

// ClientTLSConfig is the TLS configuration of a client that presents id's
// chain and accepts only a server whose leaf verifies against id's CA for
// server auth and carries serverRole (else an error wrapping
// codes.PeerRoleDenied). Host names are not checked: nodes are identified
// by CA and role, not by the address dialled.
//
// Certificate validity is judged at the config's Time (time.Now if nil).
func ClientTLSConfig(id *Identity, serverRole Role) (*tls.Config, error) {
	return clientTLSConfig(id, serverRole, nil)
}

// clientTLSConfig is ClientTLSConfig verifying the server against
// pool() at each handshake, or against id's CA if pool is nil.
func clientTLSConfig(id *Identity, serverRole Role, pool func() *x509.CertPool) (*tls.Config, error) {
	if _, err := ParseRole(string(serverRole)); err != nil {
		return nil, fmt.Errorf("client TLS config: %w", err)
	}
	tc, err := id.TLSCertificate()
	if err != nil {
		return nil, fmt.Errorf("client TLS config: %w", err)
	}
	idPool, err := id.CAPool()
	if err != nil {
		return nil, fmt.Errorf("client TLS config: %w", err)
	}
	if pool == nil {
		pool = func() *x509.CertPool { return idPool }
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{tc},
		RootCAs:            idPool,
		InsecureSkipVerify: true, // replaced by VerifyConnection: CA and role, no host name
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server presented no certificate")
		}
		leaf := cs.PeerCertificates[0]
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots:       pool(),
			CurrentTime: configTime(cfg),
			KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("server certificate %q: %w", leaf.Subject.CommonName, err)
		}
		return checkPeerRole(leaf, []Role{serverRole})
	}
	return cfg, nil
}

// configTime is the instant cfg judges certificates at.
func configTime(cfg *tls.Config) time.Time {
	if cfg.Time != nil {
		return cfg.Time()
	}
	return time.Now()
}

// checkPeerRole requires leaf's role to be one of roles.
func checkPeerRole(leaf *x509.Certificate, roles []Role) error {
	role, err := RoleOf(leaf)
	if err != nil {
		return codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("peer %q: %w", leaf.Subject.CommonName, err))
	}
	if !slices.Contains(roles, role) {
		return codes.Wrap(codes.PeerRoleDenied,
			fmt.Errorf("peer %q has role %s, want one of %v", leaf.Subject.CommonName, role, roles))
	}
	return nil
}

// PeerIdentity reads the role, node id and name from the peer's leaf of a
// connection made with ServerTLSConfig or ClientTLSConfig (which verified
// it). ok is false when the peer sent no certificate or its leaf carries no
// valid role.
func PeerIdentity(cs tls.ConnectionState) (role Role, nodeID, name string, ok bool) {
	if len(cs.PeerCertificates) == 0 {
		return "", "", "", false
	}
	leaf := cs.PeerCertificates[0]
	role, err := RoleOf(leaf)
	if err != nil {
		return "", "", "", false
	}
	return role, NodeIDOf(leaf), leaf.Subject.CommonName, true
}
