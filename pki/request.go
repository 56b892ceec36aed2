package pki

import (
	"net/netip"
	"time"
)

// LeafRequest asks the CA to sign a role-bearing TLS leaf for a public key
// the node generated itself (carried in a PKCS#10 CSR whose signature is
// checked).
type LeafRequest struct {
	CSR      []byte        // DER PKCS#10; its public key is what gets certified
	Name     string        // node name: Subject CommonName and a DNS SAN
	NodeID   string        // stable node id: a URI SAN meshd://node/<id>
	Role     Role          // Subject OrganizationalUnit; control => server+client auth, worker => client auth only
	IPs      []netip.Addr  // underlay IP SANs (control nodes serve on them)
	Lifetime time.Duration // 0 means DefaultLeafLifetime
}

// KeyLeafRequest asks the CA to sign a renewed TLS leaf for a public key
// it certified before, as raft records it: no CSR, since the node proved
// possession of the key at admission and the record names it.
type KeyLeafRequest struct {
	PublicKey []byte        // PKIX DER of the key the node's leaves certify
	Name      string        // as LeafRequest
	NodeID    string        // as LeafRequest
	Role      Role          // as LeafRequest
	IPs       []netip.Addr  // as LeafRequest
	Lifetime  time.Duration // 0 means DefaultLeafLifetime
}

// NebulaRequest asks the Nebula CA to sign a host certificate for a Nebula
// public key the node generated itself.
type NebulaRequest struct {
	PublicKey []byte       // PEM, as cert.MarshalPublicKeyToPEM writes it
	Name      string       // node name
	IP        netip.Prefix // overlay address with the cluster prefix length
	// IP6 is the IPv6 overlay address with the cluster's IPv6 prefix
	// length: required when the Nebula CA is dual-stack, refused when it
	// is not.
	IP6      netip.Prefix
	Groups   []string      // e.g. the role
	Lifetime time.Duration // 0 means DefaultNebulaLifetime
	// Routes are the prefixes the node routes for the overlay (a LAN
	// behind it, or ExitRoute as an exit node), in the order the
	// certificate stores them: the caller sorts (NebulaRoutes returns
	// them sorted by netip.Prefix.Compare). See CheckRoutes.
	Routes []netip.Prefix
}

const (
	DefaultCALifetime = 10 * 365 * 24 * time.Hour
	// DefaultLeafLifetime is a TLS leaf's lifetime: short, since leaves
	// renew automatically at 2/3 of it (DESIGN §10).
	DefaultLeafLifetime   = 30 * 24 * time.Hour
	DefaultNebulaLifetime = 365 * 24 * time.Hour
)
