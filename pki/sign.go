package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// leafBackdate is how far before "now" a leaf becomes valid, to absorb
// small clock differences between the CA holder and its peers.
const leafBackdate = 5 * time.Minute

// nodeURIScheme and nodeURIHost make the URI SAN meshd://node/<id> that
// carries a node's id in its TLS leaf.
const (
	nodeURIScheme = trust.NodeURIScheme
	nodeURIHost   = trust.NodeURIHost
)

// nodeURI returns meshd://node/<id>.
func nodeURI(id string) *url.URL {
	return &url.URL{Scheme: nodeURIScheme, Host: nodeURIHost, Path: "/" + id}
}

// SignTLS signs a role-bearing TLS leaf for the public key in req.CSR. The
// CSR's signature must verify (else codes.EnrollRejected); the role must be
// control or worker (else codes.BadRole). A control leaf may serve and act
// as a client; a worker leaf is client-only, so it can never pass as a
// server. The leaf is valid from now-5m to now+req.Lifetime, cut off at the
// CA's own expiry.
func (ca *CA) SignTLS(req LeafRequest, now time.Time) ([]byte, error) {
	if _, err := ParseRole(string(req.Role)); err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(req.CSR)
	if err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("sign TLS leaf: parse CSR: %w", err))
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("sign TLS leaf: CSR signature: %w", err))
	}
	return ca.signLeaf(csr.PublicKey, req.Name, req.NodeID, req.Role, req.IPs, req.Lifetime, now)
}

// SignTLSKey signs a renewed TLS leaf for the public key req names (PKIX
// DER, the key raft records for the node), with the same shape as SignTLS:
// role-bearing, node id in a URI SAN, valid from now-5m to
// now+req.Lifetime within the CA's validity. A key that does not parse or
// is of a type no node may hold is codes.EnrollRejected.
func (ca *CA) SignTLSKey(req KeyLeafRequest, now time.Time) ([]byte, error) {
	pub, err := x509.ParsePKIXPublicKey(req.PublicKey)
	if err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("sign TLS leaf: recorded public key: %w", err))
	}
	return ca.signLeaf(pub, req.Name, req.NodeID, req.Role, req.IPs, req.Lifetime, now)
}

// signLeaf is SignTLS and SignTLSKey once the public key is known.
func (ca *CA) signLeaf(pub any, name, nodeID string, r Role, reqIPs []netip.Addr, lifetime time.Duration, now time.Time) ([]byte, error) {
	role, err := ParseRole(string(r))
	if err != nil {
		return nil, err
	}
	if err := trust.CheckLeafKey(pub); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("sign TLS leaf: %w", err))
	}
	if name == "" || nodeID == "" {
		return nil, codes.Wrap(codes.EnrollRejected, errors.New("sign TLS leaf: name and node id are required"))
	}

	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if role == RoleControl {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	ips := make([]net.IP, 0, len(reqIPs))
	for _, ip := range reqIPs {
		if !ip.IsValid() {
			return nil, codes.Wrap(codes.EnrollRejected, errors.New("sign TLS leaf: invalid IP address"))
		}
		ips = append(ips, net.IP(ip.Unmap().AsSlice()))
	}
	if lifetime <= 0 {
		lifetime = DefaultLeafLifetime
	}
	notBefore, notAfter := ca.clampValidity(now.Add(-leafBackdate), now.Add(lifetime))
	if !notAfter.After(now) {
		return nil, fmt.Errorf("sign TLS leaf: the cluster CA expired at %s", ca.cert.NotAfter.Format(time.RFC3339))
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("sign TLS leaf: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:         name,
			OrganizationalUnit: []string{string(role)},
			Organization:       []string{"meshd"},
		},
		DNSNames:              []string{name},
		URIs:                  []*url.URL{nodeURI(nodeID)},
		IPAddresses:           ips,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usage,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign TLS leaf for %s: %w", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// clampValidity fits [nb, na] inside the X.509 CA's validity, at second
// precision (what certificates encode).
func (ca *CA) clampValidity(nb, na time.Time) (time.Time, time.Time) {
	nb = nb.UTC().Truncate(time.Second)
	na = na.UTC().Truncate(time.Second)
	if nb.Before(ca.cert.NotBefore) {
		nb = ca.cert.NotBefore
	}
	if na.After(ca.cert.NotAfter) {
		na = ca.cert.NotAfter
	}
	return nb, na
}

// SignNebula signs a Nebula host certificate for the public key in req.
// The key's curve must be the Nebula CA's (else codes.EnrollRejected), and
// req.IP must lie inside the overlay with the overlay's prefix length.
// req.Routes must pass CheckRoutes against the Nebula CA's overlay (else
// codes.EnrollRejected, naming the prefix). The certificate carries exactly
// req.IP, req.Groups and req.Routes (as its unsafe networks, "subnets" in
// a v1 certificate, in the order given), and its validity lies within the
// Nebula CA's.
func (ca *CA) SignNebula(req NebulaRequest, now time.Time) ([]byte, error) {
	pub, _, curve, err := cert.UnmarshalPublicKeyFromPEM(req.PublicKey)
	if err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("sign Nebula certificate: public key: %w", err))
	}
	if curve != ca.nebula.Curve() {
		return nil, codes.Wrap(codes.EnrollRejected,
			fmt.Errorf("sign Nebula certificate: public key curve %s, the Nebula CA uses %s", curve, ca.nebula.Curve()))
	}
	if req.Name == "" {
		return nil, codes.Wrap(codes.EnrollRejected, errors.New("sign Nebula certificate: name is required"))
	}
	networks, err := ca.nebulaNetworks(req.IP, req.IP6)
	if err != nil {
		return nil, fmt.Errorf("sign Nebula certificate for %s: %w", req.Name, err)
	}
	if err := CheckRoutes(req.Routes, ca.nebula.Networks()); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("sign Nebula certificate for %s: %w", req.Name, err))
	}

	lifetime := req.Lifetime
	if lifetime <= 0 {
		lifetime = DefaultNebulaLifetime
	}
	notBefore := now.Add(-leafBackdate).UTC().Truncate(time.Second)
	notAfter := now.Add(lifetime).UTC().Truncate(time.Second)
	if caNB := ca.nebula.NotBefore(); notBefore.Before(caNB) {
		notBefore = caNB
	}
	if caNA := ca.nebula.NotAfter(); notAfter.After(caNA) {
		notAfter = caNA
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("sign Nebula certificate: the Nebula CA expired at %s", ca.nebula.NotAfter().Format(time.RFC3339))
	}
	tbs := &cert.TBSCertificate{
		Version:   ca.nebula.Version(),
		Name:      req.Name,
		Networks:  networks,
		Groups:    append([]string(nil), req.Groups...),
		NotBefore: notBefore,
		NotAfter:  notAfter,
		PublicKey: pub,
		Curve:     curve,
	}
	if len(req.Routes) > 0 {
		tbs.UnsafeNetworks = certRoutes(req.Routes, ca.nebula.Networks())
	}
	c, err := tbs.Sign(ca.nebula, ca.nebula.Curve(), ca.nebulaKey)
	if err != nil {
		return nil, fmt.Errorf("sign Nebula certificate for %s: %w", req.Name, err)
	}
	out, err := c.MarshalPEM()
	if err != nil {
		return nil, fmt.Errorf("sign Nebula certificate for %s: %w", req.Name, err)
	}
	return out, nil
}

// nebulaNetworks are a host certificate's networks: ip, and ip6 when the
// Nebula CA is dual-stack (an IPv6 network of its own), each a host
// address inside the CA's network of its family. ip6 is required of a
// dual-stack CA and refused by any other.
func (ca *CA) nebulaNetworks(ip, ip6 netip.Prefix) ([]netip.Prefix, error) {
	if err := ca.checkOverlayIP(ip); err != nil {
		return nil, err
	}
	dual := ca.DualStack()
	if dual && !ip.Addr().Is4() {
		return nil, fmt.Errorf("overlay address %s is not IPv4", ip)
	}
	switch {
	case !dual && ip6.IsValid():
		return nil, fmt.Errorf("IPv6 overlay address %s, but the Nebula CA is IPv4-only", ip6)
	case !dual:
		return []netip.Prefix{ip}, nil
	case !ip6.IsValid():
		return nil, errors.New("the Nebula CA is dual-stack and the request names no IPv6 overlay address")
	case !ip6.Addr().Is6() || ip6.Addr().Is4In6():
		return nil, fmt.Errorf("IPv6 overlay address %s is not IPv6", ip6)
	}
	if err := ca.checkOverlayIP(ip6); err != nil {
		return nil, err
	}
	return []netip.Prefix{ip, ip6}, nil
}

// DualStack reports whether the Nebula CA is a dual-stack one (a v2 CA
// holding an IPv6 network): its host certificates carry an IPv4 and an
// IPv6 overlay address.
func (ca *CA) DualStack() bool {
	return ca.nebula.Version() == cert.Version2 && slices.ContainsFunc(ca.nebula.Networks(), func(p netip.Prefix) bool { return p.Addr().Is6() })
}

// Overlay6 is the IPv6 overlay of a dual-stack Nebula CA; invalid for an
// IPv4-only one.
func (ca *CA) Overlay6() netip.Prefix {
	if !ca.DualStack() {
		return netip.Prefix{}
	}
	for _, p := range ca.nebula.Networks() {
		if p.Addr().Is6() {
			return p
		}
	}
	return netip.Prefix{}
}

// checkOverlayIP requires ip to be a host address inside the Nebula CA's
// overlay network, with the overlay's prefix length.
func (ca *CA) checkOverlayIP(ip netip.Prefix) error {
	if !ip.IsValid() {
		return fmt.Errorf("invalid overlay address %v", ip)
	}
	for _, overlay := range ca.nebula.Networks() {
		if overlay.Contains(ip.Addr()) && ip.Bits() == overlay.Bits() && ip.Addr() != overlay.Addr() {
			return nil
		}
	}
	return fmt.Errorf("overlay address %s is not a host address in the cluster overlay %v", ip, ca.nebula.Networks())
}
